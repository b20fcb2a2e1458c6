"""A holder for the fencing drills, run as a process of its own.

    python fence_worker.py SPEC WRITER READY GO RESULT

SPEC is JSON: the lock store (``store``: ``postgres``, ``dynamodb`` or
``bucket``, and what reaches it) and the resource (``resource``). With
``"under_lockctl": true`` the worker takes its lock's key and fence from
``lockctl run``'s environment; otherwise it acquires the lock ``orders``
itself (lease 2 s). It writes its fence to READY, waits until GO exists,
writes the resource with its fence as WRITER, and writes to RESULT ``ok`` or
the name of the exception that refused it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import lease_lock
from lease_lock import fencing

AWS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def lock_store(spec: dict[str, Any]) -> Any:
    kind = spec["store"]
    if kind == "postgres":
        return lease_lock.PostgresStore(spec["url"], table=spec["table"])
    if kind == "dynamodb":
        return lease_lock.DynamoDBStore(spec["table"], endpoint_url=spec["endpoint"], region="us-east-1")
    return bucket(spec)


def bucket(spec: dict[str, Any]) -> lease_lock.BucketStore:
    return lease_lock.BucketStore(
        spec["bucket_url"],
        options={
            "aws_endpoint": spec["endpoint"],
            "aws_allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
    )


def write(spec: dict[str, Any], lock: fencing.Fenced, writer: str) -> None:
    """Write the resource as ``writer`` with ``lock``'s fence, or raise the refusal."""
    kind = spec["store"]
    if kind == "postgres":
        import psycopg

        with psycopg.connect(spec["url"]) as connection:
            with connection.transaction(), connection.cursor() as cursor:
                fencing.postgres_admit_fence(cursor, lock, "orders/1", function=spec["function"])
                cursor.execute(
                    f"INSERT INTO {spec['resource']} (id, writer) VALUES (1, %s) "
                    "ON CONFLICT (id) DO UPDATE SET writer = EXCLUDED.writer",
                    (writer,),
                )
    elif kind == "dynamodb":
        import boto3
        from botocore.exceptions import ClientError

        client = boto3.client("dynamodb", endpoint_url=spec["endpoint"], **AWS)
        try:
            client.update_item(
                **fencing.dynamodb_update_item(
                    lock,
                    TableName=spec["resource"],
                    Key={"id": {"S": "1"}},
                    UpdateExpression="SET writer = :w",
                    ExpressionAttributeValues={":w": {"S": writer}},
                )
            )
        except ClientError as error:
            refused = fencing.dynamodb_refusal(lock, error)
            if refused is not None:
                raise refused from error
            raise
    else:
        bucket(spec).fenced_put(spec["resource"], writer.encode(), lock)


def main() -> int:
    spec_text, writer, ready, go, result = sys.argv[1:6]
    spec = json.loads(spec_text)
    client = None
    if spec.get("under_lockctl"):
        lock: fencing.Fenced = fencing.FenceToken.from_env()
    else:
        client = lease_lock.LockClient(lock_store(spec), owner=f"{writer}-{os.getpid()}", lease=2)
        lock = client.acquire("orders", wait=30)
    fence = lock.fence
    with open(ready, "w") as out:
        out.write(str(fence))
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        write(spec, lock, writer)
        outcome = "ok"
    except lease_lock.FenceRefused as refused:
        outcome = type(refused).__name__
    with open(result, "w") as out:
        out.write(outcome)
    if client is not None:
        try:
            client.close()
        except lease_lock.LockError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
