"""BucketStore: locks in an S3 bucket (moto's S3, which ./scripts/test starts),
the bucket check, and the configurations refused before anything is sent.
The lock operations themselves run on it through the ``store`` fixture of
every other test file."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import lease_lock
from conftest import make_bucket_store


def test_a_lock_in_a_bucket_excludes_and_fences() -> None:
    store = make_bucket_store()
    store.validate_bucket()
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
    finally:
        a.close()
        b.close()


def test_the_bucket_check_runs_blocking_and_as_an_awaitable() -> None:
    store = make_bucket_store()
    assert store.url.startswith("s3://")
    assert repr(store) == f'BucketStore("{store.url}")'
    store.validate_bucket()

    async def check() -> None:
        await store.validate_bucket(is_async=True)

    asyncio.run(check())


def test_a_missing_bucket_fails_the_check_naming_it() -> None:
    store = make_bucket_store()
    missing = lease_lock.BucketStore(
        "s3://no-such-lease-lock-bucket/x",
        options={
            "aws_endpoint": store_endpoint(),
            "aws_allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
        request_timeout=timedelta(seconds=2),
    )
    with pytest.raises(lease_lock.StoreSetupError, match="no-such-lease-lock-bucket"):
        missing.validate_bucket()


@pytest.mark.parametrize(
    ("url", "options", "says"),
    [
        ("file:///tmp/locks", {}, "LocalFileSystem"),
        ("s3://bucket/p", {"aws_conditional_put": "disabled"}, "conditional"),
        ("s3://bucket/p", {"no_such_option": "1"}, "unknown option"),
        ("not a url", {}, "s3://bucket/prefix"),
    ],
)
def test_stores_that_cannot_hold_locks_are_refused_when_made(url: str, options: dict[str, str], says: str) -> None:
    with pytest.raises(lease_lock.StoreSetupError, match=says):
        lease_lock.BucketStore(url, options={"aws_region": "us-east-1", **options})


def test_delete_on_release_is_refused_before_anything_is_written() -> None:
    store = make_bucket_store()
    client = lease_lock.LockClient(store, owner="a")
    try:
        with pytest.raises(lease_lock.ConfigError, match="cannot delete conditionally"):
            client.acquire("job", delete_on_release=True)
        assert client.get_lock("job") is None
    finally:
        client.close()


def store_endpoint() -> str:
    import os

    endpoint = os.environ.get("LOCK_S3_ENDPOINT")
    assert endpoint
    return endpoint


def test_options_take_any_mapping_and_refuse_what_is_not_one() -> None:
    """``options`` is typed ``Mapping[str, str]``: a read-only mapping works, a list or a non-str value is a TypeError."""
    from types import MappingProxyType

    # Refused for the option it names, so the mapping itself was read.
    with pytest.raises(lease_lock.StoreSetupError, match="unknown option"):
        lease_lock.BucketStore("s3://bucket/p", options=MappingProxyType({"aws_region": "us-east-1", "no_such_option": "1"}))
    with pytest.raises(TypeError, match="options must be a mapping of str to str"):
        lease_lock.BucketStore("s3://bucket/p", options=[("aws_region", "us-east-1")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options must be a mapping of str to str"):
        lease_lock.BucketStore("s3://bucket/p", options={"aws_region": 1})  # type: ignore[dict-item]
