"""RedisStore: locks in Redis (the server ./scripts/test starts), and the
configurations refused before anything is written. The lock operations
themselves run on it through the ``store`` fixture of every other test
file."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lease_lock
from conftest import REDIS, make_redis_store


def test_a_lock_in_redis_excludes_fences_and_takes_sets_in_one_script() -> None:
    store = make_redis_store()
    assert store.prefix.startswith("py-")
    assert repr(store) == f'RedisStore("{store.url}", prefix="{store.prefix}")'
    a = lease_lock.LockClient(store, owner="a", lease=5)
    b = lease_lock.LockClient(store, owner="b", lease=5)
    try:
        with a.acquire("job") as held:
            assert held.fence == 1
            assert b.try_acquire("job") is None
        with b.acquire("job", wait=timedelta(seconds=5)) as taken:
            assert taken.fence == 2
        with a.lock_all(["x", "y"]) as group:
            assert group.taken_at_once
    finally:
        a.close()
        b.close()


def test_the_prefix_argument_wins_over_the_urls() -> None:
    if not REDIS:
        pytest.skip("LOCK_REDIS_URL is not set (run ./scripts/test)")
    store = lease_lock.RedisStore(f"{REDIS}?prefix=from-url", prefix="from-argument")
    assert store.prefix == "from-argument"
    assert lease_lock.RedisStore(f"{REDIS}?prefix=from-url").prefix == "from-url"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:1", "invalid Redis URL"),
        ("redis://127.0.0.1:9", "could not connect"),
        ("redis://127.0.0.1:1?cert=/c.pem", "together"),
    ],
)
def test_a_url_the_store_cannot_use_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(lease_lock.StoreSetupError, match=says):
        lease_lock.RedisStore(url, request_timeout=1)


def test_a_prefix_with_braces_is_refused() -> None:
    if not REDIS:
        pytest.skip("LOCK_REDIS_URL is not set (run ./scripts/test)")
    with pytest.raises(lease_lock.StoreSetupError, match="hash tag"):
        lease_lock.RedisStore(REDIS, prefix="a{b}")
