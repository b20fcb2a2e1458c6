"""python-dynamodb-lock 0.9.1's behaviour, observed the same way on it and on its replacement.

Every scenario runs twice, through the fixture ``pdl``: once on the real
``python_dynamodb_lock.python_dynamodb_lock`` (0.9.1) and once on
``lease_lock.python_dynamodb_lock``, which must behave the same. Where the two differ on
purpose, the test says so and checks each module's own behaviour:

* lease_lock's items carry one more attribute, ``fence`` (a positive integer, also
  ``lock.fence``); items are compared without it;
* leaving a ``with`` block by an exception releases the lock and lets the exception through
  (0.9.1's ``__exit__`` returns True and swallows it);
* a lock in danger goes on heartbeating and is LOCKED again once a heartbeat lands (0.9.1
  stops heartbeating it and leaves it IN_DANGER for good).

The last tests put both libraries on one table: each excludes the other, and each takes over
the other's holder once it has been killed and its lease has run out.

Needs the DynamoDB emulator at LOCK_DYNAMODB_ENDPOINT (skipped without it, failed without it
under LEASE_LOCK_REQUIRE_SERVERS=1). Clients heartbeat every 0.5 s, so that the whole file
takes seconds, not minutes.
"""

from __future__ import annotations

import datetime as datetime_module
import importlib
import inspect
import logging
import os
import pickle
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import quote

import boto3
import pytest
from boto3.dynamodb.conditions import Key
from boto3.dynamodb.types import Binary
from botocore.config import Config
from botocore.exceptions import ClientError

from blocking_proxy import BlockingProxy
from conftest import DYNAMODB, _need, eventually

LEGACY = "python_dynamodb_lock.python_dynamodb_lock"
REPLACEMENT = "lease_lock.python_dynamodb_lock"

HEARTBEAT = timedelta(seconds=0.5)
SAFE_PERIOD = timedelta(seconds=2)
LEASE = timedelta(seconds=4)
# For the tests that wait for a lease to run out.
SHORT_LEASE = timedelta(seconds=2)

# scripts/test sets AWS_REGION; boto3 itself reads AWS_DEFAULT_REGION.
REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def load(name: str) -> ModuleType:
    """The module ``name``; the test is skipped while the replacement is not written."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise  # a module it imports is missing: a real failure
        pytest.skip(f"{name} does not exist yet")


def is_legacy(module: ModuleType) -> bool:
    return module.__name__ == LEGACY


@pytest.fixture(params=[LEGACY, REPLACEMENT], ids=["0.9.1", "lease_lock"])
def pdl(request: pytest.FixtureRequest) -> ModuleType:
    """Each module in turn: python-dynamodb-lock 0.9.1, then its replacement."""
    return load(request.param)


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # boto3 refuses to sign without credentials; the emulator accepts any.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not os.environ.get(name):
            monkeypatch.setenv(name, "testing")


@pytest.fixture
def endpoint() -> str:
    return _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")


def dynamodb_client(endpoint_url: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=REGION)


def dynamodb_resource(endpoint_url: str, config: Config | None = None) -> Any:
    return boto3.resource("dynamodb", endpoint_url=endpoint_url, region_name=REGION, config=config)


def delete_table(ddb: Any, name: str) -> None:
    try:
        ddb.delete_table(TableName=name)
    except ClientError as error:
        if error.response["Error"]["Code"] != "ResourceNotFoundException":
            raise


def close_all(clients: list[Any]) -> None:
    """Closes the clients side by side: 0.9.1's close() waits for its heartbeat threads to wake."""
    if not clients:
        return
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        for future in [pool.submit(client.close) for client in clients]:
            future.result(timeout=30)


@dataclass
class Harness:
    """A fresh table on the emulator, with what the tests read it with and the clients they
    make on it (closed after the test)."""

    endpoint: str
    table: str
    ddb: Any  # boto3 DynamoDB client
    resource: Any  # boto3 DynamoDB service resource
    clients: list[Any] = field(default_factory=list)

    def client(self, module: ModuleType, resource: Any = None, **kwargs: Any) -> Any:
        """A DynamoDBLockClient of ``module`` on the table, with the short test timings."""
        options: dict[str, Any] = {
            "table_name": self.table,
            "heartbeat_period": HEARTBEAT,
            "safe_period": SAFE_PERIOD,
            "lease_duration": LEASE,
        }
        options.update(kwargs)
        client = module.DynamoDBLockClient(resource or self.resource, **options)
        self.clients.append(client)
        return client

    def item(self, partition_key: str, sort_key: str = "-") -> dict[str, Any] | None:
        """The lock's item as the table holds it now, or None."""
        result = self.resource.Table(self.table).get_item(
            Key={"lock_key": partition_key, "sort_key": sort_key}, ConsistentRead=True
        )
        item: dict[str, Any] | None = result.get("Item")
        return item

    def version(self, partition_key: str, sort_key: str = "-") -> str | None:
        item = self.item(partition_key, sort_key)
        return None if item is None else str(item["record_version_number"])

    def item_of(self, lock: Any) -> dict[str, Any]:
        """``lock``'s item, read between two heartbeats: its record_version_number and
        expiry_time are the lock's, both before and after the read."""
        found: list[dict[str, Any]] = []

        def read() -> bool:
            before = (lock.record_version_number, lock.expiry_time)
            item = self.item(lock.partition_key, lock.sort_key)
            after = (lock.record_version_number, lock.expiry_time)
            if item is None or before != after:
                return False
            if (item["record_version_number"], item["expiry_time"]) != after:
                return False
            found.append(item)
            return True

        eventually(read, timeout=5, what=f"a stable read of {lock.unique_identifier}")
        return found[-1]


@contextmanager
def open_harness(endpoint: str, creator: ModuleType) -> Iterator[Harness]:
    """A fresh table, made by ``creator``'s create_dynamodb_table; dropped afterwards."""
    ddb = dynamodb_client(endpoint)
    table = f"pdl-{uuid.uuid4().hex[:12]}"
    creator.DynamoDBLockClient.create_dynamodb_table(ddb, table_name=table)
    harness = Harness(endpoint, table, ddb, dynamodb_resource(endpoint))
    try:
        yield harness
    finally:
        close_all(harness.clients)
        delete_table(ddb, table)


@pytest.fixture
def h(pdl: ModuleType, endpoint: str) -> Iterator[Harness]:
    """A fresh table made by the module under test."""
    with open_harness(endpoint, pdl) as harness:
        yield harness


@pytest.fixture
def shared(endpoint: str) -> Iterator[Harness]:
    """A fresh table made by 0.9.1, for the tests that put both libraries on it."""
    with open_harness(endpoint, load(LEGACY)) as harness:
        yield harness


@pytest.fixture
def proxy(endpoint: str) -> Iterator[BlockingProxy]:
    """The blocking proxy in front of the emulator (ask for it before ``h``: stopped after
    the clients are closed)."""
    with BlockingProxy(endpoint) as started:
        yield started


# Heartbeats through the blocking proxy fail at once instead of after botocore's retries with
# back-off (the proxy answers with a throttling error, which botocore retries).
NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@dataclass
class Call:
    """One app_callback call, with what was true while it ran."""

    code: str
    lock: Any
    status: str  # lock.status when the callback ran
    thread: str  # the name of the thread it ran on


class Callbacks:
    """An app_callback that records its calls."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._calls: list[Call] = []

    def __call__(self, code: str, lock: Any) -> None:
        call = Call(code, lock, lock.status, threading.current_thread().name)
        with self._guard:
            self._calls.append(call)

    @property
    def calls(self) -> list[Call]:
        with self._guard:
            return list(self._calls)


T = TypeVar("T")


def in_thread(call: Callable[[], T]) -> Future[T]:
    """Runs ``call`` on a thread of its own; its result or exception comes in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:  # handed over to the future, whatever it is
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


def lock_error(module: ModuleType, code: str, call: Callable[[], object]) -> tuple[Any, float]:
    """The DynamoDBLockError that ``call`` raises, which must have ``code``, and how long the
    call took."""
    started = time.monotonic()
    with pytest.raises(module.DynamoDBLockError) as raised:
        call()
    elapsed = time.monotonic() - started
    assert raised.value.code == code, str(raised.value)
    return raised.value, elapsed


def timed_acquire(client: Any, *args: Any, **kwargs: Any) -> tuple[str, float]:
    """("acquired" or the error's code, seconds taken) of one acquire_lock call."""
    started = time.monotonic()
    try:
        client.acquire_lock(*args, **kwargs)
        outcome = "acquired"
    except Exception as error:  # the module's DynamoDBLockError, reported by its code
        outcome = getattr(error, "code", repr(error))
    return outcome, time.monotonic() - started


def without(item: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: value for name, value in item.items() if name not in names}


def seconds(period: timedelta) -> float:
    return period.total_seconds()


# --- the module's names and signatures ------------------------------------------------------

# What ``from python_dynamodb_lock.python_dynamodb_lock import *`` gives (the module has no
# __all__, so its imports come along). Its own integration script uses datetime, time and
# logger that way, and its unit tests ClientError.
STAR_NAMES = {
    "BaseDynamoDBLock",
    "ClientError",
    "Decimal",
    "DynamoDBLock",
    "DynamoDBLockClient",
    "DynamoDBLockError",
    "ThreadPoolExecutor",
    "datetime",
    "logger",
    "logging",
    "quote",
    "socket",
    "threading",
    "time",
    "uuid",
}


def star_import(module_name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(f"from {module_name} import *", namespace)
    del namespace["__builtins__"]
    return namespace


def test_a_star_import_gives_what_it_gave(pdl: ModuleType) -> None:
    names = star_import(pdl.__name__)
    if is_legacy(pdl):
        assert set(names) == STAR_NAMES
    assert set(names) >= STAR_NAMES, sorted(STAR_NAMES - set(names))
    assert names["datetime"] is datetime_module
    assert names["time"] is time
    assert names["ClientError"] is ClientError
    assert names["Decimal"] is Decimal
    assert names["ThreadPoolExecutor"] is ThreadPoolExecutor
    assert names["quote"] is quote
    for module in (logging, socket, threading, uuid):
        assert names[module.__name__] is module
    assert isinstance(names["logger"], logging.Logger)
    assert names["DynamoDBLockClient"] is pdl.DynamoDBLockClient


# The calls applications make, with 0.9.1's parameters: same names, same order, same defaults.
PUBLIC_CALLS = [
    ("DynamoDBLockClient", "__init__"),
    ("DynamoDBLockClient", "acquire_lock"),
    ("DynamoDBLockClient", "release_lock"),
    ("DynamoDBLockClient", "close"),
    ("DynamoDBLockClient", "create_dynamodb_table"),
    ("DynamoDBLock", "release"),
    ("DynamoDBLockError", "__init__"),
]


def test_the_calls_take_the_same_arguments(pdl: ModuleType) -> None:
    legacy = load(LEGACY)
    for class_name, name in PUBLIC_CALLS:
        want = list(
            inspect.signature(getattr(getattr(legacy, class_name), name)).parameters.values()
        )
        have = list(inspect.signature(getattr(getattr(pdl, class_name), name)).parameters.values())
        where = f"{class_name}.{name}: {have}"
        assert [(p.name, p.kind, p.default) for p in have[: len(want)]] == [
            (p.name, p.kind, p.default) for p in want
        ], where
        # anything added must not be needed by a 0.9.1 caller
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for extra in have[len(want) :]:
            assert extra.default is not inspect.Parameter.empty or extra.kind in variadic, where
    # the defaults that show
    acquire = inspect.signature(pdl.DynamoDBLockClient.acquire_lock).parameters
    assert acquire["sort_key"].default == "-"
    assert acquire["retry_period"].default is None and acquire["retry_timeout"].default is None
    assert (
        inspect.signature(pdl.DynamoDBLockClient.release_lock).parameters["best_effort"].default
        is True
    )
    assert inspect.signature(pdl.DynamoDBLock.release).parameters["best_effort"].default is True
    assert (
        inspect.signature(pdl.DynamoDBLockClient.close).parameters["release_locks"].default is False
    )


def test_statuses_codes_defaults_and_the_error(pdl: ModuleType) -> None:
    lock_class, error_class = pdl.DynamoDBLock, pdl.DynamoDBLockError
    statuses = ("PENDING", "LOCKED", "RELEASED", "IN_DANGER", "INVALID")
    assert tuple(getattr(lock_class, name) for name in statuses) == statuses
    assert issubclass(lock_class, pdl.BaseDynamoDBLock)
    codes = (
        "CLIENT_SHUTDOWN",
        "ACQUIRE_TIMEOUT",
        "LOCK_NOT_OWNED",
        "LOCK_STOLEN",
        "LOCK_IN_DANGER",
        "UNKNOWN",
    )
    assert tuple(getattr(error_class, name) for name in codes) == codes

    # The class attributes 0.9.1's own integration script reads its defaults from.
    defaults = {
        "_DEFAULT_TABLE_NAME": "DynamoDBLockTable",
        "_DEFAULT_PARTITION_KEY_NAME": "lock_key",
        "_DEFAULT_SORT_KEY_NAME": "sort_key",
        "_DEFAULT_TTL_ATTRIBUTE_NAME": "expiry_time",
        "_DEFAULT_HEARTBEAT_PERIOD": timedelta(seconds=5),
        "_DEFAULT_SAFE_PERIOD": timedelta(seconds=20),
        "_DEFAULT_LEASE_DURATION": timedelta(seconds=30),
        "_DEFAULT_EXPIRY_PERIOD": timedelta(hours=1),
        "_DEFAULT_HEARTBEAT_TPS": -1,
        "_DEFAULT_APP_CALLBACK_THREADPOOL_SIZE": 5,
        "_DEFAULT_READ_CAPACITY": 5,
        "_DEFAULT_WRITE_CAPACITY": 5,
        "_DEFAULT_SORT_KEY_VALUE": "-",
    }
    legacy_client = load(LEGACY).DynamoDBLockClient
    assert {n: v for n, v in vars(legacy_client).items() if n.startswith("_DEFAULT_")} == defaults
    assert {name: getattr(pdl.DynamoDBLockClient, name, None) for name in defaults} == defaults

    assert issubclass(error_class, Exception)
    plain = error_class()
    assert (plain.code, plain.message) == ("UNKNOWN", "Unknown error")
    assert str(plain) == "DynamoDBLockError: UNKNOWN - Unknown error"
    stolen = error_class(error_class.LOCK_STOLEN, "gone")
    assert (stolen.code, stolen.message) == ("LOCK_STOLEN", "gone")
    assert str(stolen) == "DynamoDBLockError: LOCK_STOLEN - gone"
    assert str(error_class(message="m", code="C")) == "DynamoDBLockError: C - m"
    copy = pickle.loads(pickle.dumps(stolen))
    assert type(copy) is error_class and (copy.code, copy.message) == ("LOCK_STOLEN", "gone")
    with pytest.raises(error_class):
        raise stolen


# --- the table ------------------------------------------------------------------------------


def test_create_dynamodb_table_makes_keys_throughput_and_ttl(pdl: ModuleType, h: Harness) -> None:
    # the harness's table: every default
    table = h.ddb.describe_table(TableName=h.table)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert table["KeySchema"] == [
        {"AttributeName": "lock_key", "KeyType": "HASH"},
        {"AttributeName": "sort_key", "KeyType": "RANGE"},
    ]
    assert sorted(table["AttributeDefinitions"], key=lambda d: str(d["AttributeName"])) == [
        {"AttributeName": "lock_key", "AttributeType": "S"},
        {"AttributeName": "sort_key", "AttributeType": "S"},
    ]
    throughput = table["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (5, 5)
    ttl = h.ddb.describe_time_to_live(TableName=h.table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiry_time"}

    # boto3's own error when the table exists
    with pytest.raises(ClientError) as raised:
        pdl.DynamoDBLockClient.create_dynamodb_table(h.ddb, table_name=h.table)
    assert raised.value.response["Error"]["Code"] == "ResourceInUseException"

    # every name and capacity chosen, and a client using those names
    name = f"pdl-named-{uuid.uuid4().hex[:8]}"
    pdl.DynamoDBLockClient.create_dynamodb_table(
        h.ddb,
        table_name=name,
        partition_key_name="pk",
        sort_key_name="sk",
        ttl_attribute_name="ttl",
        read_capacity=3,
        write_capacity=7,
    )
    try:
        table = h.ddb.describe_table(TableName=name)["Table"]
        assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]
        throughput = table["ProvisionedThroughput"]
        assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (3, 7)
        ttl = h.ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
        client = h.client(
            pdl,
            table_name=name,
            partition_key_name="pk",
            sort_key_name="sk",
            ttl_attribute_name="ttl",
        )
        lock = client.acquire_lock("job", sort_key="part-1")
        item = h.resource.Table(name).get_item(
            Key={"pk": "job", "sk": "part-1"}, ConsistentRead=True
        )
        assert set(without(item["Item"], "fence", "written_at")) == {
            "pk",
            "sk",
            "owner_name",
            "lease_duration",
            "record_version_number",
            "ttl",
        }
        lock.release()
        gone = h.resource.Table(name).get_item(
            Key={"pk": "job", "sk": "part-1"}, ConsistentRead=True
        )
        assert "Item" not in gone
    finally:
        delete_table(h.ddb, name)


# --- the lock and its item --------------------------------------------------------------------

ADDITIONAL_ATTRIBUTES: dict[str, Any] = {
    "text": "nightly report",
    "count": 42,
    "ratio": Decimal("0.25"),
    "blob": b"\x00\x01binary",
    "flag": True,
    "nothing": None,
    "list": ["a", 1, False],
    "map": {"inner": "x", "n": 2},
    "tags": {"red", "blue"},
}


def test_an_acquired_lock_describes_itself(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl, owner_name="worker-1", expiry_period=timedelta(minutes=30))
    callback = Callbacks()
    attributes = {"job": "nightly", "attempt": 3}
    before = time.time()
    lock = client.acquire_lock(
        "orders/2024 q1|eu",
        sort_key="shard 7",
        additional_attributes=attributes,
        app_callback=callback,
    )
    assert isinstance(lock, pdl.DynamoDBLock) and isinstance(lock, pdl.BaseDynamoDBLock)
    assert lock.partition_key == "orders/2024 q1|eu"
    assert lock.sort_key == "shard 7"
    assert lock.owner_name == "worker-1"
    assert type(lock.lease_duration) is float and lock.lease_duration == 4.0
    assert type(lock.record_version_number) is str and lock.record_version_number
    # int(time.time() + expiry_period); a heartbeat sets it again
    assert type(lock.expiry_time) is int
    assert int(before + 1800) <= lock.expiry_time <= int(time.time() + 1800)
    # Plain instance attributes, as 0.9.1 has them: vars(lock) shows them.
    for name in ("record_version_number", "expiry_time", "last_updated_time"):
        assert vars(lock)[name] == getattr(lock, name), name
    assert lock.additional_attributes == {"job": "nightly", "attempt": 3}
    # urllib.parse.quote of each key ('/' kept), joined by '|'
    assert lock.unique_identifier == "orders/2024%20q1%7Ceu|shard%207"
    assert lock.unique_identifier == quote(lock.partition_key) + "|" + quote(lock.sort_key)
    assert lock.status == pdl.DynamoDBLock.LOCKED == "LOCKED"
    assert lock.app_callback is callback
    assert lock.lock_client is client
    assert str(lock).startswith("DynamoDBLock::")
    assert str(client).startswith("DynamoDBLockClient::")
    assert callback.calls == []
    if not is_legacy(pdl):
        assert type(lock.fence) is int and lock.fence > 0


def test_the_default_owner_is_the_host_and_a_uuid_and_the_sort_key_a_dash(
    pdl: ModuleType, h: Harness
) -> None:
    first, second = h.client(pdl), h.client(pdl)
    owner = re.escape(socket.getfqdn()) + "[0-9a-f]{32}"
    lock = first.acquire_lock("job")
    assert re.fullmatch(owner, lock.owner_name), lock.owner_name
    assert first.acquire_lock("other job").owner_name == lock.owner_name  # one per client
    elsewhere = second.acquire_lock("third job")
    assert re.fullmatch(owner, elsewhere.owner_name) and elsewhere.owner_name != lock.owner_name
    assert lock.sort_key == "-" and lock.unique_identifier == "job|-"
    assert lock.additional_attributes == {} and lock.app_callback is None
    item = h.item_of(lock)
    assert (item["lock_key"], item["sort_key"], item["owner_name"]) == ("job", "-", lock.owner_name)


def test_the_item_holds_the_lock_and_its_additional_attributes(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl, owner_name="worker-1")
    lock = client.acquire_lock(
        "job", sort_key="s", additional_attributes=dict(ADDITIONAL_ATTRIBUTES)
    )
    assert lock.additional_attributes == ADDITIONAL_ATTRIBUTES
    item = h.item_of(lock)  # its record_version_number and expiry_time are the lock's
    # (This library adds its fence and its write time, "<ms> <rvn>".)
    assert without(item, "fence", "written_at", "record_version_number", "expiry_time") == {
        "lock_key": "job",
        "sort_key": "s",
        "owner_name": "worker-1",
        "lease_duration": Decimal(4),
        **ADDITIONAL_ATTRIBUTES,
    }
    # as DynamoDB types: numbers (N), binary (B), boolean, null, list, map, string set
    assert isinstance(item["expiry_time"], Decimal)
    assert abs(item["expiry_time"] - int(time.time() + 3600)) <= 5  # the default expiry_period
    assert isinstance(item["lease_duration"], Decimal)
    assert isinstance(item["count"], Decimal) and isinstance(item["blob"], Binary)
    assert type(item["flag"]) is bool and item["nothing"] is None
    assert type(item["tags"]) is set and type(item["map"]) is dict
    if is_legacy(pdl):
        assert "fence" not in item
    else:
        fence = item["fence"]
        assert isinstance(fence, Decimal) and fence == fence.to_integral_value() and fence > 0
        assert lock.fence == fence


def test_heartbeats_change_the_version_and_keep_the_attributes(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl)
    lock = client.acquire_lock("job", additional_attributes={"job": "nightly", "n": 1})
    first = h.item_of(lock)
    versions = {first["record_version_number"]}

    def two_heartbeats() -> bool:
        version = h.version("job")
        if version is not None:
            versions.add(version)
        return len(versions) >= 3

    eventually(two_heartbeats, timeout=4 * seconds(HEARTBEAT) + 2, what="two heartbeats")
    later = h.item_of(lock)
    assert later["record_version_number"] != first["record_version_number"]
    assert lock.status == "LOCKED"
    # everything else stays (a fence too: it belongs to the acquisition, not to a heartbeat;
    # this library's write time is each heartbeat's own)
    assert without(later, "record_version_number", "expiry_time", "written_at") == without(
        first, "record_version_number", "expiry_time", "written_at"
    )
    if "written_at" in later:
        assert later["written_at"].endswith(" " + later["record_version_number"])


# --- acquiring: timeouts and retries --------------------------------------------------------


def test_acquiring_a_held_lock_times_out(pdl: ModuleType, h: Harness) -> None:
    holder = h.client(pdl, owner_name="holder")
    waiter = h.client(pdl, owner_name="waiter")
    held = holder.acquire_lock("job")
    error, elapsed = lock_error(
        pdl,
        "ACQUIRE_TIMEOUT",
        lambda: waiter.acquire_lock(
            "job", retry_period=timedelta(seconds=0.2), retry_timeout=timedelta(seconds=1)
        ),
    )
    assert error.message == "acquire_lock() timed out: job|-"
    assert str(error) == "DynamoDBLockError: ACQUIRE_TIMEOUT - acquire_lock() timed out: job|-"
    # 0.9.1 gives up when its next try would come after the timeout: up to one retry period early
    assert 1 - 0.2 - 0.05 <= elapsed <= 1 + 1.5
    assert held.status == "LOCKED" and h.item_of(held)["owner_name"] == "holder"

    holder.acquire_lock("a b", sort_key="c|d")
    error, _ = lock_error(
        pdl,
        "ACQUIRE_TIMEOUT",
        lambda: waiter.acquire_lock(
            "a b",
            sort_key="c|d",
            retry_period=timedelta(seconds=0.1),
            retry_timeout=timedelta(seconds=0.3),
        ),
    )
    assert error.message == "acquire_lock() timed out: a%20b|c%7Cd"


def test_falsy_retry_timeouts_mean_lease_duration_plus_heartbeat_period(
    pdl: ModuleType, h: Harness
) -> None:
    holder = h.client(pdl)
    holder.acquire_lock("job")
    # this waiter's defaults: retry_period 0.25 s, retry_timeout 1 + 0.25 s
    waiter = h.client(
        pdl, heartbeat_period=timedelta(seconds=0.25), lease_duration=timedelta(seconds=1)
    )
    tries = {
        "None": None,
        "0": 0,
        "timedelta(0)": timedelta(0),  # falsy too
        "0.3 s": timedelta(seconds=0.3),
    }
    pending = {
        name: in_thread(partial(timed_acquire, waiter, "job", retry_timeout=value))
        for name, value in tries.items()
    }
    results = {name: future.result(timeout=10) for name, future in pending.items()}
    for name in ("None", "0", "timedelta(0)"):
        outcome, elapsed = results[name]
        assert outcome == "ACQUIRE_TIMEOUT" and 1.0 <= elapsed <= 2.5, (name, results)
    outcome, elapsed = results["0.3 s"]
    assert outcome == "ACQUIRE_TIMEOUT" and elapsed < 0.9, results


def test_falsy_retry_periods_mean_the_heartbeat_period(
    pdl: ModuleType, h: Harness, proxy: BlockingProxy
) -> None:
    holder = h.client(pdl)
    tries = {
        "None": None,
        "0": 0,
        "timedelta(0)": timedelta(0),
        "0.1 s": timedelta(seconds=0.1),
    }
    held = [holder.acquire_lock(name) for name in tries]
    # (a heartbeat period shorter than the safe period, which lease_lock requires)
    # The waiter's requests go through the proxy, which counts them: the keys are released
    # once every waiter has made its first try (one request each), however slow the server.
    waiter = h.client(
        pdl,
        resource=dynamodb_resource(proxy.url),
        heartbeat_period=timedelta(seconds=2),
        safe_period=timedelta(seconds=6),
        lease_duration=timedelta(seconds=10),
    )
    pending: dict[str, Future[tuple[str, float]]] = {}
    for count, (name, value) in enumerate(tries.items(), start=1):
        pending[name] = in_thread(
            partial(
                timed_acquire, waiter, name, retry_period=value, retry_timeout=timedelta(seconds=5)
            )
        )
        # one at a time, so that the 0.1 s waiter's later tries cannot be counted for another's
        eventually(lambda: proxy.forwarded_count() >= count, timeout=5, what=f"{name}'s first try")
    # Each waiter has found its key held. Released now, each key is taken at the next try: at
    # 2 s with a falsy period (the heartbeat period), at 0.5 s with 0.1 s. 0.9.1 tries at exact
    # multiples of the period; the bounds also allow a replacement that draws each pause
    # between half and all of it.
    for lock in held:
        lock.release()
    results = {name: future.result(timeout=10) for name, future in pending.items()}
    for name in ("None", "0", "timedelta(0)"):
        outcome, elapsed = results[name]
        assert outcome == "acquired" and 0.95 <= elapsed <= 2.8, (name, results)
    outcome, elapsed = results["0.1 s"]
    assert outcome == "acquired" and elapsed < 0.9, results


# --- releasing ------------------------------------------------------------------------------


def test_releasing(pdl: ModuleType, h: Harness) -> None:
    owner = h.client(pdl, owner_name="owner")
    other = h.client(pdl, owner_name="other")
    lock = owner.acquire_lock("job")

    # Another client does not release it: silently by default, LOCK_NOT_OWNED when asked.
    other.release_lock(lock)
    other.release_lock(lock, best_effort=True)
    error, _ = lock_error(pdl, "LOCK_NOT_OWNED", lambda: other.release_lock(lock, False))
    assert error.message == "Lock is not owned by this client"
    assert lock.status == "LOCKED" and h.item_of(lock)["owner_name"] == "owner"

    # Its own client does: the item goes, and the key is free at once.
    lock.release()
    assert lock.status == "RELEASED" and h.item("job") is None

    # Again does nothing, whoever asks and however.
    lock.release()
    lock.release(best_effort=False)
    owner.release_lock(lock, best_effort=False)
    other.release_lock(lock, best_effort=False)
    assert lock.status == "RELEASED"

    started = time.monotonic()
    again = other.acquire_lock("job", retry_timeout=timedelta(seconds=2))
    assert time.monotonic() - started < 1
    # the old lock leaves the new holder's item alone
    lock.release(best_effort=False)
    assert h.item_of(again)["owner_name"] == "other"
    other.release_lock(again, best_effort=False)
    assert again.status == "RELEASED" and h.item("job") is None


def test_a_with_block_releases_the_lock(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl)
    with client.acquire_lock("job") as lock:
        assert lock.status == "LOCKED" and h.item("job") is not None
    assert lock.status == "RELEASED" and h.item("job") is None
    held = client.acquire_lock("job")
    with held as entered:
        assert entered is held
    assert held.status == "RELEASED" and h.item("job") is None


def test_an_exception_leaving_a_with_block(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl)
    if is_legacy(pdl):
        # 0.9.1's __exit__ returns True: the exception is swallowed, the code goes on after
        # the block.
        with client.acquire_lock("job") as lock:
            raise ValueError("boom")
        assert lock.__exit__(None, None, None) is True
    else:
        # lease_lock lets it through (documented difference)
        with pytest.raises(ValueError, match="boom"), client.acquire_lock("job") as lock:
            raise ValueError("boom")
        assert not lock.__exit__(None, None, None)
    assert lock.status == "RELEASED" and h.item("job") is None


# --- fine-grained locks ---------------------------------------------------------------------


def test_sort_keys_make_separate_locks(pdl: ModuleType, h: Harness) -> None:
    a = h.client(pdl, owner_name="a")
    b = h.client(pdl, owner_name="b")
    orders = a.acquire_lock("customer-7", sort_key="orders")
    invoices = b.acquire_lock("customer-7", sort_key="invoices", retry_timeout=timedelta(seconds=1))
    assert (orders.unique_identifier, invoices.unique_identifier) == (
        "customer-7|orders",
        "customer-7|invoices",
    )
    found = h.resource.Table(h.table).query(
        KeyConditionExpression=Key("lock_key").eq("customer-7"), ConsistentRead=True
    )
    assert {i["sort_key"]: i["owner_name"] for i in found["Items"]} == {
        "orders": "a",
        "invoices": "b",
    }
    # The same pair stays exclusive, whoever asks: its own holder too (no reentrancy).
    for client, sort_key in ((b, "orders"), (a, "invoices"), (a, "orders")):
        lock_error(
            pdl,
            "ACQUIRE_TIMEOUT",
            partial(
                client.acquire_lock,
                "customer-7",
                sort_key=sort_key,
                retry_period=timedelta(seconds=0.1),
                retry_timeout=timedelta(seconds=0.3),
            ),
        )
    # The partition key alone (sort key '-') is one more lock.
    whole = b.acquire_lock("customer-7", retry_timeout=timedelta(seconds=1))
    assert whole.unique_identifier == "customer-7|-"
    assert orders.status == invoices.status == whole.status == "LOCKED"


# --- app callbacks --------------------------------------------------------------------------


def test_a_stolen_lock_calls_back_lock_stolen(pdl: ModuleType, h: Harness) -> None:
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pdl-test-callbacks")
    client = h.client(pdl, app_callback_executor=executor)
    try:
        callback = Callbacks()
        overwritten = client.acquire_lock("overwritten", app_callback=callback)
        deleted = client.acquire_lock("deleted", app_callback=callback)
        quiet = client.acquire_lock("no callback")
        kept = client.acquire_lock("kept", app_callback=callback)

        # Someone changes the table behind the client's back.
        table = h.resource.Table(h.table)
        intruder = dict(h.item_of(overwritten), owner_name="intruder")
        intruder["record_version_number"] = str(uuid.uuid4())
        table.put_item(Item=intruder)
        table.delete_item(Key={"lock_key": "deleted", "sort_key": "-"})
        table.delete_item(Key={"lock_key": "no callback", "sort_key": "-"})

        eventually(
            lambda: len(callback.calls) >= 2,
            timeout=4 * seconds(HEARTBEAT) + 2,
            what="two LOCK_STOLEN callbacks",
        )
        eventually(lambda: quiet.status == "INVALID", timeout=2, what="the quiet lock INVALID")
        time.sleep(3 * seconds(HEARTBEAT))  # and nothing more comes
        calls = callback.calls
        assert sorted((call.code, call.lock.partition_key) for call in calls) == [
            ("LOCK_STOLEN", "deleted"),
            ("LOCK_STOLEN", "overwritten"),
        ]
        assert {id(call.lock) for call in calls} == {id(overwritten), id(deleted)}
        for call in calls:
            assert call.status == "INVALID"  # already, when the callback runs
            assert call.thread.startswith("pdl-test-callbacks"), call.thread
        assert overwritten.status == deleted.status == "INVALID"

        # The others go on heartbeating.
        assert kept.status == "LOCKED"
        version = kept.record_version_number
        eventually(
            lambda: h.version("kept") not in (None, version),
            timeout=4 * seconds(HEARTBEAT),
            what="a heartbeat of the kept lock",
        )

        # A stolen lock's release does nothing, even when asked for errors.
        overwritten.release(best_effort=False)
        client.release_lock(deleted, best_effort=False)
        assert overwritten.status == deleted.status == "INVALID"
        assert without(h.item("overwritten") or {}, "fence") == without(intruder, "fence")
    finally:
        client.close()
        executor.shutdown(wait=True)


def test_a_lock_whose_heartbeats_fail_calls_back_lock_in_danger(
    pdl: ModuleType, proxy: BlockingProxy, h: Harness
) -> None:
    callback = Callbacks()
    client = h.client(pdl, resource=dynamodb_resource(proxy.url, NO_RETRIES))
    lock = client.acquire_lock("job", app_callback=callback)
    first = lock.record_version_number
    eventually(
        lambda: h.version("job") not in (None, first),
        timeout=4 * seconds(HEARTBEAT),
        what="a heartbeat through the proxy",
    )

    proxy.block("UpdateItem")
    blocked_at = time.monotonic()
    eventually(
        lambda: bool(callback.calls),
        timeout=seconds(SAFE_PERIOD) + 4 * seconds(HEARTBEAT) + 2,
        what="LOCK_IN_DANGER",
    )
    # not before the safe period has passed since the last heartbeat that landed, which was at
    # most one heartbeat period before the block
    assert time.monotonic() - blocked_at >= seconds(SAFE_PERIOD) - seconds(HEARTBEAT) - 0.2
    [call] = callback.calls
    assert (call.code, call.status) == ("LOCK_IN_DANGER", "IN_DANGER") and call.lock is lock
    assert lock.status == "IN_DANGER"
    assert proxy.blocked_count("UpdateItem") > 0
    version = h.version("job")
    assert version == lock.record_version_number  # the last heartbeat that landed

    if is_legacy(pdl):
        time.sleep(seconds(HEARTBEAT))
        tried = proxy.blocked_count("UpdateItem")
        time.sleep(2 * seconds(HEARTBEAT))
        assert len(callback.calls) == 1  # once, not at every check
        # 0.9.1 stops heartbeating a lock in danger ...
        assert proxy.blocked_count("UpdateItem") == tried
        proxy.unblock()
        time.sleep(4 * seconds(HEARTBEAT))
        # ... so it stays IN_DANGER, whatever DynamoDB does again.
        assert lock.status == "IN_DANGER" and h.version("job") == version
    else:
        # lease_lock goes on trying, and is LOCKED again once a heartbeat lands. It takes the
        # proxy's answer for throttling and paces its heartbeats down (to one every 2 s at the
        # slowest), so unblock at once: within the lease, a heartbeat still lands in time.
        proxy.unblock()
        eventually(
            lambda: lock.status == "LOCKED",
            timeout=4 * seconds(HEARTBEAT) + 4,
            what="LOCKED again",
        )
        assert h.item_of(lock)["record_version_number"] != version
        assert len(callback.calls) == 1
    # either way, it releases cleanly
    lock.release(best_effort=False)
    assert lock.status == "RELEASED" and h.item("job") is None


# --- closing --------------------------------------------------------------------------------


def test_close_leaves_the_locks_until_their_lease_runs_out(pdl: ModuleType, h: Harness) -> None:
    closing = h.client(pdl, owner_name="closing", lease_duration=SHORT_LEASE)
    lock = closing.acquire_lock("kept")
    other = closing.acquire_lock("released after close")
    closing.close()
    version = h.version("kept")
    assert lock.status == other.status == "LOCKED"  # the lock objects are left as they were

    error, _ = lock_error(pdl, "CLIENT_SHUTDOWN", lambda: closing.acquire_lock("new"))
    assert error.message == "Client already shut down"
    assert str(error) == "DynamoDBLockError: CLIENT_SHUTDOWN - Client already shut down"
    closing.close()  # again: nothing
    closing.close(release_locks=True)  # after a close, nothing either: the locks stay
    time.sleep(3 * seconds(HEARTBEAT))
    assert h.version("kept") == version  # no heartbeat since close()
    assert h.item("released after close") is not None

    # A closed client's lock can still be released.
    other.release(best_effort=False)
    assert other.status == "RELEASED" and h.item("released after close") is None

    # Another client takes the other one over once its lease has run out, counted from when
    # the taker first sees its version.
    taker = h.client(pdl, owner_name="taker")
    started = time.monotonic()
    taken = taker.acquire_lock(
        "kept", retry_period=timedelta(seconds=0.25), retry_timeout=timedelta(seconds=10)
    )
    elapsed = time.monotonic() - started
    assert 0.9 * seconds(SHORT_LEASE) <= elapsed <= seconds(SHORT_LEASE) + 2.5
    assert h.item_of(taken)["owner_name"] == "taker"

    # Released now, the old lock finds someone else's version.
    error, _ = lock_error(pdl, "LOCK_STOLEN", lambda: lock.release(best_effort=False))
    assert error.message == "Lock was stolen by someone else"
    assert lock.status == "RELEASED"
    assert h.item_of(taken)["owner_name"] == "taker"


def test_closing_with_every_lock_released_deletes_the_items(pdl: ModuleType, h: Harness) -> None:
    client = h.client(pdl)
    locks = [client.acquire_lock("a"), client.acquire_lock("b", sort_key="x")]
    client.close(release_locks=True)
    assert [lock.status for lock in locks] == ["RELEASED", "RELEASED"]
    assert h.item("a") is None and h.item("b", "x") is None
    client.close()
    client.close(release_locks=True)
    lock_error(pdl, "CLIENT_SHUTDOWN", lambda: client.acquire_lock("a"))


def test_close_ends_a_pending_acquire_with_client_shutdown(pdl: ModuleType, h: Harness) -> None:
    holder = h.client(pdl)
    holder.acquire_lock("job")
    waiter = h.client(pdl)
    pending = in_thread(
        lambda: waiter.acquire_lock(
            "job", retry_period=timedelta(seconds=0.2), retry_timeout=timedelta(seconds=30)
        )
    )
    time.sleep(0.5)
    waiter.close()
    with pytest.raises(pdl.DynamoDBLockError) as raised:
        pending.result(timeout=5)
    assert raised.value.code == "CLIENT_SHUTDOWN"


def test_dynamodb_errors_come_as_unknown(pdl: ModuleType, h: Harness) -> None:
    # made without an error: the table is not looked at before the first call
    client = h.client(pdl, table_name=f"missing-{uuid.uuid4().hex[:8]}")
    lock_error(pdl, "UNKNOWN", lambda: client.acquire_lock("job"))


# --- the documented usage, run as written (only the import changes) -------------------------

# docs/usage.rst of python-dynamodb-lock: every snippet, in an order that runs.
DOCS_USAGE = """
from {module} import *

import boto3

# Table creation, with the helper class-method and every default
ddb_client = boto3.client('dynamodb')
DynamoDBLockClient.create_dynamodb_table(ddb_client)

# Basic usage: the lock client is made at application start-up
dynamodb_resource = boto3.resource('dynamodb')
lock_client = DynamoDBLockClient(dynamodb_resource)

lock = lock_client.acquire_lock('my_key')
observe('acquired')  # app logic that requires the lock
lock.release()
observe('released')

# Context management: the lock is released when the block ends
with lock_client.acquire_lock('my_key'):
    observe('in the with block')  # app logic that requires the lock
observe('after the with block')

# ... and closed at application shutdown
lock_client.close()
"""


@pytest.fixture
def default_table(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The docs' code unchanged: boto3.client('dynamodb') and boto3.resource('dynamodb')
    reach the emulator through the environment, and the table has its default name (dropped
    before and after the test)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    ddb = dynamodb_client(endpoint)
    delete_table(ddb, "DynamoDBLockTable")
    yield "DynamoDBLockTable"
    delete_table(ddb, "DynamoDBLockTable")


def test_the_usage_documented(pdl: ModuleType, default_table: str, endpoint: str) -> None:
    table = dynamodb_resource(endpoint).Table(default_table)
    seen: list[tuple[str, str | None]] = []

    def observe(stage: str) -> None:
        found = table.get_item(Key={"lock_key": "my_key", "sort_key": "-"}, ConsistentRead=True)
        seen.append((stage, found["Item"]["owner_name"] if "Item" in found else None))

    namespace: dict[str, Any] = {"observe": observe}
    try:
        exec(compile(DOCS_USAGE.format(module=pdl.__name__), "usage.rst", "exec"), namespace)
    finally:
        if "lock_client" in namespace:
            namespace["lock_client"].close()
    owner = namespace["lock"].owner_name
    assert seen == [
        ("acquired", owner),
        ("released", None),
        ("in the with block", owner),
        ("after the with block", None),
    ]
    assert namespace["lock"].status == "RELEASED"


# tests_integration/test_app.py of python-dynamodb-lock, the same calls: a command line that
# either creates the table or acquires a lock, holds it, releases it. It takes datetime, time
# and logger from the star import, as the original does; the endpoint is an argument here.
TEST_APP = """
from {module} import *

import argparse

import boto3


def create_table(args):
    ddb_client = boto3.client('dynamodb', endpoint_url=args.endpoint_url, region_name=args.region)
    DynamoDBLockClient.create_dynamodb_table(
        ddb_client,
        table_name=args.table_name,
        partition_key_name=args.partition_key_name,
        sort_key_name=args.sort_key_name,
        ttl_attribute_name=args.ttl_attribute_name,
        read_capacity=args.read_capacity,
        write_capacity=args.write_capacity,
    )


def acquire_lock(args):
    if not args.partition_key:
        raise RuntimeError('--partition_key is needed')
    ddb_resource = boto3.resource(
        'dynamodb', endpoint_url=args.endpoint_url, region_name=args.region
    )
    lock_client = DynamoDBLockClient(
        ddb_resource,
        table_name=args.table_name,
        partition_key_name=args.partition_key_name,
        sort_key_name=args.sort_key_name,
        ttl_attribute_name=args.ttl_attribute_name,
        heartbeat_period=datetime.timedelta(seconds=args.heartbeat_period),
        safe_period=datetime.timedelta(seconds=args.safe_period),
        lease_duration=datetime.timedelta(seconds=args.lease_duration),
    )
    lock = lock_client.acquire_lock(
        args.partition_key,
        sort_key=args.sort_key,
        retry_period=datetime.timedelta(seconds=args.retry_period),
        retry_timeout=datetime.timedelta(seconds=args.retry_timeout),
        app_callback=app_callback,
    )
    report(args.name, 'acquired', lock)
    time.sleep(args.hold_period)
    lock.release()
    report(args.name, 'released', lock)
    lock_client.close()


def app_callback(code, lock):
    logger.warning('app callback: %s - %s', code, str(lock))


def main(argv):
    defaults = DynamoDBLockClient
    parser = argparse.ArgumentParser(description='python_dynamodb_lock test app')
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument('--create_table', action='store_true')
    mode.add_argument('--acquire_lock', action='store_true')
    parser.add_argument('--endpoint_url')
    parser.add_argument('--region')
    parser.add_argument('--name')
    parser.add_argument('--table_name', default=defaults._DEFAULT_TABLE_NAME)
    parser.add_argument('--partition_key_name', default=defaults._DEFAULT_PARTITION_KEY_NAME)
    parser.add_argument('--sort_key_name', default=defaults._DEFAULT_SORT_KEY_NAME)
    parser.add_argument('--ttl_attribute_name', default=defaults._DEFAULT_TTL_ATTRIBUTE_NAME)
    parser.add_argument('--read_capacity', type=int, default=defaults._DEFAULT_READ_CAPACITY)
    parser.add_argument('--write_capacity', type=int, default=defaults._DEFAULT_WRITE_CAPACITY)
    parser.add_argument('--partition_key')
    parser.add_argument('--sort_key', default=defaults._DEFAULT_SORT_KEY_VALUE)
    parser.add_argument('--retry_period', type=int, default=2)
    parser.add_argument('--retry_timeout', type=int, default=10)
    parser.add_argument('--hold_period', type=int, default=1)
    parser.add_argument(
        '--heartbeat_period', type=int,
        default=defaults._DEFAULT_HEARTBEAT_PERIOD.total_seconds(),
    )
    parser.add_argument(
        '--safe_period', type=int, default=defaults._DEFAULT_SAFE_PERIOD.total_seconds()
    )
    parser.add_argument(
        '--lease_duration', type=int, default=defaults._DEFAULT_LEASE_DURATION.total_seconds()
    )
    args = parser.parse_args(argv)
    if args.create_table:
        create_table(args)
    else:
        acquire_lock(args)
"""


def test_the_integration_app(pdl: ModuleType, endpoint: str) -> None:
    events: list[tuple[str, str, float, str, str]] = []

    def report(name: str, event: str, lock: Any) -> None:
        events.append((name, event, time.monotonic(), lock.status, lock.owner_name))

    namespace: dict[str, Any] = {"report": report}
    exec(compile(TEST_APP.format(module=pdl.__name__), "test_app.py", "exec"), namespace)
    main: Callable[[list[str]], None] = namespace["main"]
    table = f"pdl-app-{uuid.uuid4().hex[:8]}"
    common = ["--endpoint_url", endpoint, "--region", REGION, "--table_name", table]
    timings = ["--heartbeat_period", "1", "--safe_period", "2", "--lease_duration", "4"]
    timings += ["--retry_period", "1", "--retry_timeout", "10"]
    acquire = ["--acquire_lock", *common, *timings]
    ddb = dynamodb_client(endpoint)
    try:
        main(["--create_table", *common])
        described = ddb.describe_table(TableName=table)["Table"]
        assert [k["AttributeName"] for k in described["KeySchema"]] == ["lock_key", "sort_key"]
        first = in_thread(
            lambda: main(
                [*acquire, "--name", "first", "--partition_key", "job", "--hold_period", "2"]
            )
        )
        eventually(lambda: bool(events), timeout=10, what="the first app holding the lock")
        second = in_thread(lambda: main([*acquire, "--name", "second", "--partition_key", "job"]))
        first.result(timeout=20)
        second.result(timeout=20)
    finally:
        delete_table(ddb, table)
    assert [(name, event, status) for name, event, _, status, _ in events] == [
        ("first", "acquired", "LOCKED"),
        ("first", "released", "RELEASED"),
        ("second", "acquired", "LOCKED"),
        ("second", "released", "RELEASED"),
    ]
    assert events[2][2] >= events[1][2]  # the second got it after the first let go
    assert events[0][4] != events[2][4]  # two clients, two default owners


# --- both libraries on one table ------------------------------------------------------------

PAIRS = [
    pytest.param(holder, waiter, id=f"{holder_id}-then-{waiter_id}")
    for holder, holder_id in ((LEGACY, "0.9.1"), (REPLACEMENT, "lease_lock"))
    for waiter, waiter_id in ((LEGACY, "0.9.1"), (REPLACEMENT, "lease_lock"))
]


@pytest.mark.parametrize(("holder_module", "waiter_module"), PAIRS)
def test_a_holder_keeps_out_a_waiter_of_either_library(
    holder_module: str, waiter_module: str, shared: Harness
) -> None:
    holder_lib, waiter_lib = load(holder_module), load(waiter_module)
    holder = shared.client(holder_lib, owner_name="holder", lease_duration=SHORT_LEASE)
    waiter = shared.client(waiter_lib, owner_name="waiter")
    held = holder.acquire_lock("job", sort_key="s", additional_attributes={"by": "holder"})
    # Longer than the holder's lease: only its heartbeats keep the waiter out.
    error, _ = lock_error(
        waiter_lib,
        "ACQUIRE_TIMEOUT",
        lambda: waiter.acquire_lock(
            "job",
            sort_key="s",
            retry_period=timedelta(seconds=0.25),
            retry_timeout=SHORT_LEASE + timedelta(seconds=1.5),
        ),
    )
    assert error.message == "acquire_lock() timed out: job|s"
    assert held.status == "LOCKED"
    item = shared.item_of(held)
    assert (item["owner_name"], item["by"]) == ("holder", "holder")

    held.release()
    started = time.monotonic()
    taken = waiter.acquire_lock("job", sort_key="s", retry_timeout=timedelta(seconds=2))
    assert time.monotonic() - started < 1
    item = shared.item_of(taken)
    assert item["owner_name"] == "waiter" and "by" not in item
    taken.release()


# Acquires with the module named on its command line, says "held", and waits to be killed.
HOLDER_SCRIPT = """
import importlib
import sys
import time
from datetime import timedelta

import boto3

module_name, endpoint, region, table, key = sys.argv[1:]
module = importlib.import_module(module_name)
resource = boto3.resource("dynamodb", endpoint_url=endpoint, region_name=region)
client = module.DynamoDBLockClient(
    resource,
    table_name=table,
    owner_name="killed",
    heartbeat_period=timedelta(seconds=0.5),
    safe_period=timedelta(seconds=1),
    lease_duration=timedelta(seconds=2),
)
client.acquire_lock(key)
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("holder_module", "waiter_module"), PAIRS)
def test_a_killed_holder_is_taken_over_by_either_library(
    holder_module: str, waiter_module: str, shared: Harness, tmp_path: Path
) -> None:
    load(holder_module)  # skipped here, before any process starts, when it does not exist
    waiter_lib = load(waiter_module)
    errors = tmp_path / "holder.stderr"
    holder_arguments = [holder_module, shared.endpoint, REGION, shared.table, "job"]
    with errors.open("w") as stderr:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER_SCRIPT, *holder_arguments],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], 60)
        line = holder.stdout.readline() if ready else ""
        assert line == "held\n", f"the holder said {line!r}; its stderr: {errors.read_text()}"
        version = shared.version("job")
        eventually(
            lambda: shared.version("job") != version,
            timeout=4 * seconds(HEARTBEAT),
            what="a heartbeat of the holder",
        )
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert (shared.item("job") or {}).get("owner_name") == "killed"

        waiter = shared.client(waiter_lib, owner_name="new owner")
        started = time.monotonic()
        lock = waiter.acquire_lock(
            "job", retry_period=timedelta(seconds=0.25), retry_timeout=timedelta(seconds=15)
        )
        elapsed = time.monotonic() - started
        # after the holder's 2 s lease, counted from when the waiter first saw its version
        assert 0.9 * 2 <= elapsed <= 2 * 2 + 1
        assert lock.status == "LOCKED" and shared.item_of(lock)["owner_name"] == "new owner"
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()


# --- what only the replacement has ------------------------------------------------------------


def test_a_takeover_replaces_the_crashed_holders_attributes_and_raises_the_fence(
    shared: Harness,
) -> None:
    replacement = load(REPLACEMENT)
    # What a python-dynamodb-lock holder that crashed leaves: its item, with its attributes.
    shared.resource.Table(shared.table).put_item(
        Item={
            "lock_key": "job", "sort_key": "-", "owner_name": "crashed",
            "lease_duration": Decimal("1.0"), "record_version_number": "rvn-crashed",
            "expiry_time": int(time.time()) + 3600, "job_id": "42", "progress": Decimal(7),
        }
    )
    client = shared.client(replacement, owner_name="successor")
    before = time.time_ns() // 1000
    lock = client.acquire_lock("job", retry_period=timedelta(seconds=0.2), additional_attributes={"job_id": "43"})
    after = time.time_ns() // 1000
    item = shared.item_of(lock)
    assert without(item, "expiry_time", "record_version_number", "written_at") == {
        "lock_key": "job", "sort_key": "-", "owner_name": "successor",
        "lease_duration": Decimal(4), "fence": Decimal(lock.fence), "job_id": "43",
    }, "none of the crashed holder's attributes survive, as with 0.9.1's PutItem"
    assert item["written_at"].endswith(" " + item["record_version_number"])
    # The crashed holder wrote no fence: this one starts at the clock's floor,
    # microseconds since the epoch when it wrote.
    assert before <= lock.fence <= after

    # The next takeover (of this lock, frozen by its client's close) raises the fence.
    client.close()
    taker = shared.client(replacement, owner_name="taker")
    taken = taker.acquire_lock("job", retry_period=timedelta(seconds=0.2), retry_timeout=timedelta(seconds=10))
    assert taken.fence == lock.fence + 1 and "job_id" not in shared.item_of(taken)


def test_kept_released_records_keep_fences_rising(shared: Harness) -> None:
    h, pdl = shared, load(REPLACEMENT)
    client = h.client(pdl, keep_released_records=True)
    lock = client.acquire_lock("job", additional_attributes={"step": "one"})
    assert lock.fence >= 1
    lock.release(best_effort=False)
    item = h.item("job")
    assert item is not None and item["released"] is True and "step" not in item, item
    again = client.acquire_lock("job", retry_timeout=timedelta(seconds=1))
    assert again.fence == lock.fence + 1, "the kept item carries the fence on"
    assert h.item_of(again)["released"] is False
    with pytest.raises(pdl.DynamoDBLockError, match="released"):
        client.acquire_lock("other", additional_attributes={"released": True})
    # Without the option a client still deletes; the item made again starts
    # at the clock's floor, above the deleted item's fence (no fence repeats).
    again.release(best_effort=False)
    plain = h.client(pdl)
    first = plain.acquire_lock("fresh")
    first.release(best_effort=False)
    assert h.item("fresh") is None
    before = time.time_ns() // 1000
    remade = plain.acquire_lock("fresh")
    assert first.fence < remade.fence and before <= remade.fence <= time.time_ns() // 1000


def test_with_a_clock_bound_a_closed_clients_lock_is_taken_over_once_its_lease_has_passed(
    shared: Harness,
) -> None:
    h, pdl = shared, load(REPLACEMENT)
    closing = h.client(pdl, owner_name="closing", lease_duration=SHORT_LEASE)
    closing.acquire_lock("job")
    assert "written_at" in h.item("job"), "every write carries its writer's time"
    closing.close()  # the lock stays, unheartbeaten, as a crashed process's would
    written = time.monotonic()  # no write of the holder's after this
    bound = timedelta(seconds=0.2)
    time.sleep(max(0.0, written + seconds(SHORT_LEASE) * 1.01 + 0.2 + 0.05 - time.monotonic()))
    # A fresh client without a bound watches the record for a lease first.
    watcher = h.client(pdl, owner_name="watcher", lease_duration=SHORT_LEASE)
    lock_error(pdl, "ACQUIRE_TIMEOUT", lambda: watcher.acquire_lock("job", retry_timeout=timedelta(seconds=0.3)))
    # With one, it takes the lock at once.
    fresh = h.client(pdl, owner_name="fresh", lease_duration=SHORT_LEASE, max_clock_difference=bound)
    # (Its budget, 0.3 s, is far shorter than the lease it would watch.)
    taken = fresh.acquire_lock("job", retry_timeout=timedelta(seconds=0.3))
    assert h.item_of(taken)["owner_name"] == "fresh"
    with pytest.raises(pdl.DynamoDBLockError, match="written_at"):
        fresh.acquire_lock("other", additional_attributes={"written_at": 1})


def test_periods_in_seconds_and_a_safe_period_as_long_as_the_lease(
    shared: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    replacement = load(REPLACEMENT)
    # Seconds and timedeltas mixed: the default retry timeout is still lease + heartbeat.
    mixed = shared.client(replacement, heartbeat_period=0.5, lease_duration=LEASE)
    mixed.acquire_lock("mixed")
    other = shared.client(replacement, heartbeat_period=0.5, lease_duration=LEASE)
    error, elapsed = lock_error(replacement, "ACQUIRE_TIMEOUT", lambda: other.acquire_lock("mixed"))
    assert seconds(LEASE) <= elapsed <= seconds(LEASE) + 0.5 + 2.5, elapsed

    # 0.9.1's default safe period (20 s) with a shorter lease: accepted, with a warning, and a
    # lock is in danger before its lease is over (0.2 s before: a tenth of it).
    # Logged where 0.9.1 logs, so a program's logging configuration still applies.
    with caplog.at_level(logging.WARNING, logger=LEGACY):
        client = shared.client(
            replacement, safe_period=timedelta(seconds=20), lease_duration=SHORT_LEASE
        )
    assert "safe_period (20s) is not shorter than lease_duration (2s)" in caplog.text
    assert {record.name for record in caplog.records} == {LEGACY}
    lock = client.acquire_lock("long safe period")
    assert 0 < lock._native.remaining <= seconds(SHORT_LEASE) * 0.99 - 0.2 + 0.01
