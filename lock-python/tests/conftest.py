"""Stores for the tests: in memory always; DynamoDB and S3 (moto), PostgreSQL
etcd and Redis at the servers ./scripts/test starts (LOCK_DYNAMODB_ENDPOINT,
LOCK_S3_ENDPOINT, LOCK_POSTGRES_URL, LOCK_ETCD_ENDPOINT, LOCK_REDIS_URL).

Run alone (``pytest lock-python/tests``) without those servers, the tests of
those stores are skipped; ./scripts/test sets LEASE_LOCK_REQUIRE_SERVERS=1 so
that a missing server fails instead.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import lease_lock

DYNAMODB = os.environ.get("LOCK_DYNAMODB_ENDPOINT")
POSTGRES = os.environ.get("LOCK_POSTGRES_URL")
S3 = os.environ.get("LOCK_S3_ENDPOINT")
ETCD = os.environ.get("LOCK_ETCD_ENDPOINT")
REDIS = os.environ.get("LOCK_REDIS_URL")
#: The bucket the tests make on moto's S3 (each store under a prefix of its own).
BUCKET = "lease-lock-py"
REQUIRE = os.environ.get("LEASE_LOCK_REQUIRE_SERVERS") == "1"


def _need(value: str | None, what: str) -> str:
    if value:
        return value
    if REQUIRE:
        pytest.fail(f"{what} is not set: ./scripts/test starts the server and sets it")
    pytest.skip(f"{what} is not set (run ./scripts/test)")


def make_dynamodb_store(**kwargs: Any) -> lease_lock.DynamoDBStore:
    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    store = lease_lock.DynamoDBStore(
        f"py-{uuid.uuid4().hex[:12]}", endpoint_url=endpoint, region="us-east-1", **kwargs
    )
    store.create_table(wait=60)
    return store


def make_postgres_store() -> lease_lock.PostgresStore:
    url = _need(POSTGRES, "LOCK_POSTGRES_URL")
    store = lease_lock.PostgresStore(url, table=f"py_{uuid.uuid4().hex[:12]}")
    store.create_schema()
    return store


def make_bucket_store(url: str | None = None) -> lease_lock.BucketStore:
    """A store on moto's S3 at ``url`` (default: a fresh prefix of the test
    bucket), the bucket made if absent."""
    endpoint = _need(S3, "LOCK_S3_ENDPOINT")
    # moto makes a bucket on an unsigned PUT, and answers 200 if it exists.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=10).close()
    return lease_lock.BucketStore(
        url or f"s3://{BUCKET}/py-{uuid.uuid4().hex[:12]}",
        options={
            "aws_endpoint": endpoint,
            "aws_allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
    )


def make_etcd_store() -> lease_lock.EtcdStore:
    endpoint = _need(ETCD, "LOCK_ETCD_ENDPOINT")
    return lease_lock.EtcdStore(f"etcd://{endpoint}/py-{uuid.uuid4().hex[:12]}")


def make_redis_store() -> lease_lock.RedisStore:
    url = _need(REDIS, "LOCK_REDIS_URL")
    return lease_lock.RedisStore(url, prefix=f"py-{uuid.uuid4().hex[:12]}")


STORES: dict[str, Callable[[], Any]] = {
    "memory": lease_lock.MemoryStore,
    "dynamodb": lambda: make_dynamodb_store(sort_key="sort_key"),
    "postgres": make_postgres_store,
    "bucket": make_bucket_store,
    "etcd": make_etcd_store,
    "redis": make_redis_store,
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> Any:
    """Each store in turn."""
    return STORES[request.param]()


@pytest.fixture
def shared_store() -> Any:
    """A store two processes can share: PostgreSQL."""
    return make_postgres_store()


@pytest.fixture
def clients(store: Any) -> Iterator[Callable[..., lease_lock.LockClient]]:
    """Makes clients on the test's store and closes them after it."""
    made: list[lease_lock.LockClient] = []

    def make(owner: str, **kwargs: Any) -> lease_lock.LockClient:
        client = lease_lock.LockClient(store, owner=owner, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def eventually(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait until ``check()`` is true, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)
