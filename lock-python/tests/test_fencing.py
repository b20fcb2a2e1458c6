"""Fences checked at the user's own resources, from Python: DynamoDB items
(moto), PostgreSQL rows (psycopg) and objects in a bucket (moto's S3). A
stale holder's write is refused and the newer one kept; another lock's fence
is refused; bad input is refused before anything is sent."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import lease_lock
from lease_lock import fencing

from conftest import BUCKET, DYNAMODB, S3, _need, make_bucket_store, make_postgres_store


def two_locks(store: Any, key: str) -> tuple[lease_lock.Lock, lease_lock.Lock]:
    """Two holders of ``key`` one after the other: the first (stale once the
    second holds) and the second."""
    client = lease_lock.LockClient(store, owner=f"py-{uuid.uuid4().hex[:6]}")
    try:
        with client.lock(key) as first:
            pass
        second = client.acquire(key)
        second.release()
    finally:
        client.close()
    assert first.fence < second.fence
    return first, second


# --- DynamoDB items -------------------------------------------------------


@pytest.fixture
def dynamodb() -> Iterator[tuple[Any, str]]:
    """A boto3 client on moto and a fresh table of the user's own (key ``id``)."""
    boto3 = pytest.importorskip("boto3")
    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    table = f"orders-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield client, table
    client.delete_table(TableName=table)


def test_a_stale_holders_dynamodb_writes_are_refused_and_the_newer_one_kept(
    dynamodb: tuple[Any, str],
) -> None:
    from botocore.exceptions import ClientError

    client, table = dynamodb
    stale, fresh = two_locks(lease_lock.MemoryStore(), "orders")
    key = {"id": {"S": "42"}}
    client.put_item(
        **fencing.dynamodb_put_item(
            fresh, TableName=table, Item={**key, "status": {"S": "shipped"}}
        )
    )
    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["fence"] == {"N": str(fresh.fence)}
    assert item["fence_lock"] == {"S": "orders"}

    attempts = [
        lambda: client.put_item(
            **fencing.dynamodb_put_item(
                stale, TableName=table, Item={**key, "status": {"S": "cancelled"}}
            )
        ),
        lambda: client.update_item(
            **fencing.dynamodb_update_item(
                stale,
                TableName=table,
                Key=key,
                UpdateExpression="SET #s = :s",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":s": {"S": "cancelled"}},
            )
        ),
        lambda: client.delete_item(**fencing.dynamodb_delete_item(stale, TableName=table, Key=key)),
    ]
    for attempt in attempts:
        with pytest.raises(ClientError) as caught:
            attempt()
        refused = fencing.dynamodb_refusal(stale, caught.value, resource="order 42")
        assert isinstance(refused, lease_lock.StaleFence), caught.value
        assert (refused.presented, refused.highest, refused.resource) == (
            stale.fence,
            fresh.fence,
            "order 42",
        )

    # In a transaction, beside another item's put.
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"id": {"S": "audit-1"}}}},
                {
                    "Update": fencing.dynamodb_update_item(
                        stale,
                        TableName=table,
                        Key=key,
                        UpdateExpression="SET #s = :s",
                        ExpressionAttributeNames={"#s": "status"},
                        ExpressionAttributeValues={":s": {"S": "cancelled"}},
                    )
                },
            ]
        )
    refused = fencing.dynamodb_refusal(stale, caught.value, item_index=1)
    assert isinstance(refused, lease_lock.StaleFence), caught.value.response
    assert "Item" not in client.get_item(TableName=table, Key={"id": {"S": "audit-1"}})

    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["status"] == {"S": "shipped"}

    # The newer holder's own condition failing is not a refused fence.
    with pytest.raises(ClientError) as caught:
        client.update_item(
            **fencing.dynamodb_update_item(
                fresh,
                TableName=table,
                Key=key,
                ConditionExpression="#s = :was",
                UpdateExpression="SET #s = :s",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":was": {"S": "new"}, ":s": {"S": "lost"}},
            )
        )
    assert fencing.dynamodb_refusal(fresh, caught.value) is None


def test_another_locks_fence_is_refused_on_dynamodb_through_the_resource_api(
    dynamodb: tuple[Any, str],
) -> None:
    import boto3
    from botocore.exceptions import ClientError

    client, table_name = dynamodb
    table = boto3.resource(
        "dynamodb",
        endpoint_url=client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).Table(table_name)
    store = lease_lock.MemoryStore()
    _, orders = two_locks(store, "orders")
    _, invoices = two_locks(store, "invoices")
    table.put_item(**fencing.dynamodb_put_item(orders, typed=False, Item={"id": "7", "status": "paid"}))
    with pytest.raises(ClientError) as caught:
        table.put_item(**fencing.dynamodb_put_item(invoices, typed=False, Item={"id": "7"}))
    refused = fencing.dynamodb_refusal(invoices, caught.value)
    assert isinstance(refused, lease_lock.OtherLockFence), caught.value.response
    assert (refused.fenced_by, refused.presented_by) == ("orders", "invoices")
    assert table.get_item(Key={"id": "7"}, ConsistentRead=True)["Item"]["status"] == "paid"


def test_a_dynamodb_request_that_cannot_be_fenced_is_refused_before_sending() -> None:
    store = lease_lock.MemoryStore()
    _, lock = two_locks(store, "orders")
    with pytest.raises(lease_lock.InvalidInput, match="must be a string"):
        fencing.dynamodb_put_item(lock, TableName="t", Item={}, ConditionExpression=object())
    with pytest.raises(lease_lock.InvalidInput, match="has no Key"):
        fencing.dynamodb_update_item(lock, TableName="t")
    with pytest.raises(lease_lock.InvalidInput, match="two different"):
        fencing.dynamodb_put_item(lock, TableName="t", Item={}, fence_attribute="f", lock_attribute="f")
    with pytest.raises(TypeError, match="held lease_lock.Lock or a FenceToken"):
        fencing.dynamodb_put_item("orders", TableName="t", Item={})  # type: ignore[arg-type]
    with pytest.raises(lease_lock.InvalidInput, match="start at 1"):
        fencing.dynamodb_put_item(fencing.FenceToken("orders", 0), TableName="t", Item={})


def test_a_fence_token_names_the_lock_as_a_held_lock_does() -> None:
    client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="a")
    with client.lock("jobs", sort_key="nightly") as lock:
        assert fencing.FenceToken.of(lock) == fencing.FenceToken("jobs/nightly", lock.fence)
    client.close()
    env = {"LOCK_KEY": "jobs", "LOCK_SORT_KEY": "nightly", "LOCK_FENCE": "7"}
    assert fencing.FenceToken.from_env(env) == fencing.FenceToken("jobs/nightly", 7)
    assert fencing.FenceToken.from_env({"LOCK_KEY": "jobs", "LOCK_FENCE": "7"}).key == "jobs"
    with pytest.raises(lease_lock.InvalidInput, match="LOCK_FENCE is not set"):
        fencing.FenceToken.from_env({"LOCK_KEY": "jobs"})


def test_a_fence_token_names_a_key_with_a_slash_apart_from_a_sort_key() -> None:
    # Two locks, each with its own fences: never one name at a resource.
    client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="a")
    with client.lock("jobs/nightly") as plain, client.lock("jobs", sort_key="nightly") as sorted_:
        assert fencing.FenceToken.of(plain).key == "jobs%2Fnightly"
        assert fencing.FenceToken.of(sorted_).key == "jobs/nightly"
    client.close()
    assert fencing.FenceToken.from_env({"LOCK_KEY": "jobs/nightly", "LOCK_FENCE": "7"}).key == "jobs%2Fnightly"
    env = {"LOCK_KEY": "a/b", "LOCK_SORT_KEY": "c%", "LOCK_FENCE": "7"}
    assert fencing.FenceToken.from_env(env).key == "a%2Fb/c%25"
    # What lockctl gives, when it gives it, is the name as it is.
    assert fencing.FenceToken.from_env({**env, "LOCK_FENCE_KEY": "x/y"}).key == "x/y"
    # A token's key is a printed key: one no lock prints as is refused.
    with pytest.raises(lease_lock.InvalidInput, match="more than one unescaped /"):
        fencing.dynamodb_put_item(fencing.FenceToken("a/b/c", 1), TableName="t", Item={})


def test_a_leadership_fences_an_object_under_its_locks_name() -> None:
    # A Leadership given to fenced_put is its lock (key, sort key and fence),
    # named as a Lock of the same key is: a later holder of the lock is
    # admitted after it, not refused as another lock's.
    store = lease_lock.BucketStore("memory:///locks")
    client = lease_lock.LockClient(store, owner="a")
    with client.elect("jobs/leader") as election:
        leadership = election.leadership(timeout=10)
        assert leadership is not None
        store.fenced_put("data/schedule", b"leader", leadership)
    with client.lock("jobs/leader") as lock:
        assert lock.fence > leadership.fence
        store.fenced_put("data/schedule", b"lock", lock)
    assert store.fenced_get("data/schedule") == (b"lock", lock.fence)
    client.close()


def test_a_reader_writer_lock_fences_under_its_write_lock_for_reads_and_writes() -> None:
    # A read's token is the lock's name and the writer fence it was admitted
    # with (what `read.fence` says), as a write's is: not its reader slot's.
    client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="a")
    config = client.rw_lock("config", 4)
    with config.write(wait=10) as write:
        written = fencing.FenceToken.of(write)
    assert written == fencing.FenceToken("config/writer", write.fence)
    with config.read(wait=10) as read:
        assert read.fence == written.fence
        assert fencing.FenceToken.of(read) == written
    with config.upgradeable_read(wait=10) as upgradeable:
        assert fencing.FenceToken.of(upgradeable) == written
    client.close()


# --- PostgreSQL rows ------------------------------------------------------


def test_a_stale_holders_postgres_transaction_is_refused_and_rolled_back() -> None:
    psycopg = pytest.importorskip("psycopg")
    store = make_postgres_store()
    function = store.create_fence_guard()
    assert function == store.fence_function
    stale, fresh = two_locks(store, "orders")
    url = os.environ["LOCK_POSTGRES_URL"]
    table = f"orders_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, status text, fence bigint)")
    resource = f"{table}/42"
    with psycopg.connect(url) as connection:
        with connection.transaction(), connection.cursor() as cursor:
            fencing.postgres_admit_fence(cursor, fresh, resource, function=function)
            cursor.execute(f"INSERT INTO {table} VALUES (42, 'shipped', %s)", (fresh.fence,))
        with pytest.raises(lease_lock.StaleFence) as caught:
            with connection.transaction(), connection.cursor() as cursor:
                cursor.execute(f"UPDATE {table} SET status = 'cancelled' WHERE id = 42")
                fencing.postgres_admit_fence(cursor, stale, resource, function=function)
        assert (caught.value.presented, caught.value.highest) == (stale.fence, fresh.fence)
        assert isinstance(caught.value.__cause__, psycopg.Error)
        # Another lock's fence.
        _, invoices = two_locks(store, "invoices")
        with pytest.raises(lease_lock.OtherLockFence) as other:
            with connection.transaction(), connection.cursor() as cursor:
                fencing.postgres_admit_fence(cursor, invoices, resource, function=function)
        assert (other.value.fenced_by, other.value.presented_by) == ("orders", "invoices")
        # Bad input, before anything is sent.
        for bad in ("", "a\0b", "x" * 3000):
            with pytest.raises(lease_lock.InvalidInput):
                with connection.cursor() as cursor:
                    fencing.postgres_admit_fence(cursor, fresh, bad, function=function)
        row = connection.execute(f"SELECT status FROM {table} WHERE id = 42").fetchone()
        assert row == ("shipped",), "the stale transaction rolled back"


# --- Objects in a bucket --------------------------------------------------


def test_a_stale_holders_object_write_is_refused_and_the_newer_one_kept() -> None:
    store = make_bucket_store()
    stale, fresh = two_locks(store, "reports")
    path = f"data-{uuid.uuid4().hex[:12]}/today.csv"
    store.fenced_put(path, b"newer", fresh)
    with pytest.raises(lease_lock.StaleFence) as caught:
        store.fenced_put(path, b"older", stale)
    assert (caught.value.presented, caught.value.highest) == (stale.fence, fresh.fence)
    assert store.fenced_get(path) == (b"newer", fresh.fence)
    assert store.fenced_get(f"{path}.missing") is None

    async def written_async() -> tuple[bytes, int | None] | None:
        await store.fenced_put(path, b"newest", fresh, is_async=True)
        return await store.fenced_get(path, is_async=True)

    assert asyncio.run(written_async()) == (b"newest", fresh.fence)
    with pytest.raises(lease_lock.InvalidInput, match="not a valid object path"):
        store.fenced_put("a//b", b"x", fresh)


def test_a_takeover_that_writes_the_same_bytes_changes_the_objects_etag() -> None:
    """S3's ETag is the MD5 of the body: were a newer holder's write of the
    same bytes to give the object back the ETag an older holder read, that
    holder's ``If-Match`` write would be admitted after it. Every fenced
    write's body ends with a write tag of its own, which reads take off."""
    boto3 = pytest.importorskip("boto3")
    store = make_bucket_store()
    stale, fresh = two_locks(store, "reports")
    path = f"data-{uuid.uuid4().hex[:12]}/today.csv"
    s3 = boto3.client(
        "s3",
        endpoint_url=_need(S3, "LOCK_S3_ENDPOINT"),
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    store.fenced_put(path, b"C", stale)
    read_by_the_stale_holder = s3.head_object(Bucket=BUCKET, Key=path)["ETag"]
    store.fenced_put(path, b"C", fresh)
    assert s3.head_object(Bucket=BUCKET, Key=path)["ETag"] != read_by_the_stale_holder
    assert store.fenced_get(path) == (b"C", fresh.fence)


def test_a_fenced_write_the_store_fails_says_whether_trying_again_can_help() -> None:
    endpoint = _need(S3, "LOCK_S3_ENDPOINT")
    store = make_bucket_store()
    _, lock = two_locks(store, "reports")
    options = {
        "aws_allow_http": "true",
        "aws_region": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    # A bucket that does not exist: trying again cannot help.
    missing = lease_lock.BucketStore(
        f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/locks",
        options={**options, "aws_endpoint": endpoint},
    )
    with pytest.raises(lease_lock.StoreError) as caught:
        missing.fenced_put("data/x", b"x", lock)
    assert not caught.value.retryable, caught.value
    # Nobody listening: it may pass.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    unreachable = lease_lock.BucketStore(
        f"s3://{BUCKET}/locks",
        options={**options, "aws_endpoint": f"http://127.0.0.1:{closed}"},
        request_timeout=2,
    )
    with pytest.raises(lease_lock.StoreError) as caught:
        unreachable.fenced_put("data/x", b"x", lock)
    assert caught.value.retryable, caught.value
