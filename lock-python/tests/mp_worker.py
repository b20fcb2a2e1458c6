"""A worker for the multiprocessing tests: importable by a child started with spawn or forkserver."""

from __future__ import annotations

import os
from typing import Any

import lease_lock


def take_turn(endpoint: str, table: str, key: str, fences: Any) -> None:
    """In a fresh process: make the store and the client, hold ``key`` once, report its fence."""
    store = lease_lock.DynamoDBStore(table, endpoint_url=endpoint, region="us-east-1")
    client = lease_lock.LockClient(store, owner=f"worker-{os.getpid()}")
    with client.lock(key, wait=60) as lock:
        fences.put(lock.fence)
    client.close()
