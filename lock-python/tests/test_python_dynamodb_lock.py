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

import argparse
import importlib
import inspect
import os
import pickle
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
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
        """``lock``'s item, read between two heartbeats: its record_version_number is the
        lock's, both before and after the read."""
        found: list[dict[str, Any]] = []

        def read() -> bool:
            before = lock.record_version_number
            item = self.item(lock.partition_key, lock.sort_key)
            if item is None or not before == item["record_version_number"] == (
                lock.record_version_number
            ):
                return False
            found.append(item)
            return True

        eventually(read, timeout=5, what=f"a stable read of {lock.unique_identifier}")
        return found[-1]


