"""Drills with real processes: holder A takes the lock, is frozen with
SIGSTOP past its lease, B takes over and writes the resource with its fence,
A is resumed and writes with its old fence: refused, and the resource keeps
B's write. On PostgreSQL, DynamoDB (moto) and S3 (moto); with the Python
API (the worker acquires) and under ``lockctl run`` (the worker takes the
fence from its environment).

The resource is the store's own kind: a row, an item, an object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lease_lock
from lease_lock import fencing

from conftest import DYNAMODB, POSTGRES, S3, BUCKET, REQUIRE, _need, make_bucket_store

WORKER = Path(__file__).with_name("fence_worker.py")
LIMIT = 60.0


def lockctl() -> str:
    """The lockctl binary ./scripts/test built (``LOCKCTL``)."""
    path = os.environ.get("LOCKCTL") or str(Path(__file__).parents[2] / "target" / "debug" / "lockctl")
    if not os.access(path, os.X_OK):
        if REQUIRE:
            pytest.fail(f"lockctl is not built at {path}: ./scripts/test builds it")
        pytest.skip(f"lockctl is not built at {path}")
    return path


def wait_for(path: Path, what: str) -> str:
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{what}: {path} did not appear within {LIMIT} s")


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# --- each store: the lock store, the resource, and how to read it back -------


def postgres_spec() -> dict[str, Any]:
    psycopg = pytest.importorskip("psycopg")
    url = _need(POSTGRES, "LOCK_POSTGRES_URL")
    table = f"py_{uuid.uuid4().hex[:12]}"
    store = lease_lock.PostgresStore(url, table=table)
    store.create_schema()
    function = store.create_fence_guard()
    resource = f"{table}_orders"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {resource} (id int PRIMARY KEY, writer text NOT NULL)")
    return {"store": "postgres", "url": url, "table": table, "function": function, "resource": resource}


def dynamodb_spec() -> dict[str, Any]:
    boto3 = pytest.importorskip("boto3")
    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    table = f"py-{uuid.uuid4().hex[:12]}"
    lease_lock.DynamoDBStore(table, endpoint_url=endpoint, region="us-east-1").create_table(wait=60)
    resource = f"orders-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_table(
        TableName=resource,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return {"store": "dynamodb", "endpoint": endpoint, "table": table, "resource": resource}


def bucket_spec() -> dict[str, Any]:
    endpoint = _need(S3, "LOCK_S3_ENDPOINT")
    make_bucket_store()  # makes the bucket
    prefix = f"py-{uuid.uuid4().hex[:12]}"
    return {
        "store": "bucket",
        "endpoint": endpoint,
        "bucket_url": f"s3://{BUCKET}/{prefix}",
        "resource": f"data-{prefix}/orders/1",
    }


SPECS = {"postgres": postgres_spec, "dynamodb": dynamodb_spec, "bucket": bucket_spec}


def written_by(spec: dict[str, Any]) -> tuple[str, int | None]:
    """Who wrote the resource last, and (where the resource keeps it) with what fence."""
    if spec["store"] == "postgres":
        import psycopg

        with psycopg.connect(spec["url"]) as connection:
            row = connection.execute(f"SELECT writer FROM {spec['resource']} WHERE id = 1").fetchone()
            assert row is not None
            return str(row[0]), None
    if spec["store"] == "dynamodb":
        import boto3

        item = boto3.client(
            "dynamodb",
            endpoint_url=spec["endpoint"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).get_item(TableName=spec["resource"], Key={"id": {"S": "1"}}, ConsistentRead=True)["Item"]
        return item["writer"]["S"], int(item["fence"]["N"])
    sys.path.insert(0, str(WORKER.parent))
    from fence_worker import bucket

    found = bucket(spec).fenced_get(spec["resource"])
    assert found is not None
    return found[0].decode(), found[1]


def lockctl_args(spec: dict[str, Any]) -> list[str]:
    if spec["store"] == "postgres":
        return ["--store", spec["url"], "--table", spec["table"]]
    if spec["store"] == "dynamodb":
        return ["--table", spec["table"], "--endpoint-url", spec["endpoint"]]
    return ["--store", spec["bucket_url"], "--endpoint-url", spec["endpoint"]]


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def env() -> dict[str, str]:
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.mark.parametrize("store", sorted(SPECS))
@pytest.mark.parametrize("surface", ["python", "lockctl"])
def test_a_frozen_holders_late_write_is_refused_and_the_new_holders_kept(
    store: str, surface: str, scratch: Path
) -> None:
    spec = SPECS[store]()
    ready, go, result = scratch / "a.ready", scratch / "go", scratch / "a.result"
    worker = [sys.executable, str(WORKER)]
    if surface == "python":
        a_spec = json.dumps(spec)
        a_command = [*worker, a_spec, "A", str(ready), str(go), str(result)]
    else:
        a_spec = json.dumps({**spec, "under_lockctl": True})
        a_command = [
            lockctl(),
            *lockctl_args(spec),
            "run",
            "orders",
            "--lease",
            "2s",
            "--",
            *worker,
            a_spec,
            "A",
            str(ready),
            str(go),
            str(result),
        ]
    a = subprocess.Popen(a_command, env=env(), stderr=subprocess.PIPE, text=True)
    try:
        a_fence = int(wait_for(ready, "A took the lock"))
        # Freeze all of A (under lockctl: lockctl, its watchdog and the worker).
        frozen = [a.pid, *descendants(a.pid)]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        # B takes over once A's lease has run out, and writes with its fence.
        b_ready, b_result = scratch / "b.ready", scratch / "b.result"
        b_args = [str(b_ready), str(go), str(b_result)]
        open(go, "w").close()  # B writes at once; A, frozen, does not see it yet
        if surface == "python":
            b = subprocess.run([*worker, json.dumps(spec), "B", *b_args], env=env(), timeout=LIMIT)
        else:
            b = subprocess.run(
                [
                    lockctl(),
                    *lockctl_args(spec),
                    "run",
                    "orders",
                    "--wait",
                    "30s",
                    "--lease",
                    "2s",
                    "--",
                    *worker,
                    json.dumps({**spec, "under_lockctl": True}),
                    "B",
                    *b_args,
                ],
                env=env(),
                timeout=LIMIT,
            )
        assert b.returncode == 0
        assert b_result.read_text() == "ok"
        b_fence = int(b_ready.read_text())
        assert b_fence > a_fence
        # A resumes (under lockctl, only its worker: lockctl's watchdog would
        # stop it) and writes with its old fence.
        for pid in frozen:
            if surface == "python" or (pid != a.pid and "__watchdog" not in cmdline(pid)):
                os.kill(pid, signal.SIGCONT)
        assert wait_for(result, "A's late write") == "StaleFence"
        writer, fence = written_by(spec)
        assert writer == "B"
        assert fence in (None, b_fence)
    finally:
        for pid in [a.pid, *descendants(a.pid)]:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            a.wait(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            a.kill()
            a.wait()


def test_python_and_lockctl_writers_of_one_reader_writer_lock_fence_under_one_name(scratch: Path) -> None:
    """A writer of the Python API and one of ``lockctl run --exclusive``
    (its command's ``FenceToken.from_env()``) on one reader-writer lock write
    one object in fence order: a late fence is stale, never another lock's.
    A read's token and a ``--shared`` run's name the same lock."""
    endpoint = _need(S3, "LOCK_S3_ENDPOINT")
    url = f"s3://{BUCKET}/py-rw-{uuid.uuid4().hex[:12]}"
    store = make_bucket_store(url)
    path = f"data-{uuid.uuid4().hex[:12]}/config"
    client = lease_lock.LockClient(store, owner="py")
    config = client.rw_lock("config", 4)

    def under_lockctl(mode: str) -> fencing.FenceToken:
        """The token the command of ``lockctl run config MODE`` takes."""
        seen = scratch / f"{mode}.json"
        script = f"import json, os; open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))"
        subprocess.run(
            [lockctl(), "--store", url, "--endpoint-url", endpoint, "run", "config", mode,
             "--readers", "4", "--wait", "30s", "--", sys.executable, "-c", script],
            env=env(), check=True, timeout=LIMIT,
        )
        return fencing.FenceToken.from_env(json.loads(seen.read_text()))

    with config.write(wait=30) as write:
        store.fenced_put(path, b"python", write)
        first = fencing.FenceToken.of(write)
    exclusive = under_lockctl("--exclusive")
    assert exclusive.fence > first.fence
    # Admitted after the Python writer's fence (refused as another lock's
    # before: lockctl's command named the lock `config`).
    store.fenced_put(path, b"lockctl", exclusive)
    assert exclusive.key == first.key
    assert under_lockctl("--shared") == exclusive
    with config.read(wait=30) as read:
        assert fencing.FenceToken.of(read) == exclusive
    with config.write(wait=30) as write:
        store.fenced_put(path, b"python again", write)
    with pytest.raises(lease_lock.StaleFence):
        store.fenced_put(path, b"late", exclusive)
    assert store.fenced_get(path) == (b"python again", write.fence)
    client.close()
