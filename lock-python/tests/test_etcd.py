"""EtcdStore: locks in etcd (the member ./scripts/test starts), and the
configurations refused before anything is sent. The lock operations
themselves run on it through the ``store`` fixture of every other test
file."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lease_lock
from conftest import ETCD, make_etcd_store


def test_a_lock_in_etcd_excludes_and_fences() -> None:
    store = make_etcd_store()
    assert store.url.startswith("etcd://") and store.prefix.startswith("py-")
    assert repr(store) == f'EtcdStore("{store.url}")'
    a = lease_lock.LockClient(store, owner="a", lease=5)
    b = lease_lock.LockClient(store, owner="b", lease=5)
    try:
        with a.acquire("job") as held:
            assert held.fence >= 1
            assert b.try_acquire("job") is None
        with b.acquire("job", wait=timedelta(seconds=5)) as taken:
            assert taken.fence == held.fence + 1
        info = a.get_lock("job")
        assert info is not None and info.owner == "b" and info.released
        with a.lock_all(["x", "y", "z"]) as group:
            assert group.taken_at_once
            fences = group.fences
            assert sorted(fences) == ["x", "y", "z"] and all(fence >= 1 for fence in fences.values())
            for key in ("x", "y", "z"):
                info = a.get_lock(key)
                assert info is not None and info.owner == "a" and info.fence == fences[key]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:1/x", "scheme"),
        ("etcd://127.0.0.1:2379", "no prefix"),
        ("etcd://127.0.0.1/x", "no port"),
        ("etcd://127.0.0.1:2379/x?sslmode=on", "unknown option"),
    ],
)
def test_a_url_the_store_cannot_use_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(lease_lock.StoreSetupError, match=says):
        lease_lock.EtcdStore(url)


def test_a_user_without_a_password_is_refused() -> None:
    with pytest.raises(lease_lock.InvalidInput, match="together"):
        lease_lock.EtcdStore("etcd://127.0.0.1:2379/x", user="app")


def test_a_member_not_reached_raises_a_retryable_store_error() -> None:
    if not ETCD:
        pytest.skip("LOCK_ETCD_ENDPOINT is not set (run ./scripts/test)")
    store = lease_lock.EtcdStore("etcd://127.0.0.1:9/x", request_timeout=1)
    client = lease_lock.LockClient(store, owner="a", lease=5)
    try:
        with pytest.raises(lease_lock.StoreError) as raised:
            client.get_lock("job")
        assert raised.value.retryable
    finally:
        client.close()
