"""lease_lock.metrics(): the figures the clients of the process recorded."""

from __future__ import annotations

import lease_lock


def _total(name: str, **labels: str) -> float:
    total = 0.0
    for metric in lease_lock.metrics():
        if metric["name"] == name and all(metric["labels"].get(k) == v for k, v in labels.items()):
            value = metric["value"]
            total += value["count"] if isinstance(value, dict) else value
    return total


def test_acquires_store_calls_and_locks_held_are_counted() -> None:
    acquired = _total("lock_acquires_total", outcome="acquired")
    timeouts = _total("lock_acquires_total", outcome="timeout")
    applied = _total("lock_store_calls_total", op="put", outcome="applied")
    store = lease_lock.MemoryStore()
    holder = lease_lock.LockClient(store, owner="holder")
    waiter = lease_lock.LockClient(store, owner="waiter")
    try:
        with holder.lock("job") as lock:
            assert _total("lock_locks_held") >= 1
            assert waiter.try_acquire("job") is None
            assert lock.is_safe
        assert _total("lock_acquires_total", outcome="acquired") == acquired + 1
        assert _total("lock_acquires_total", outcome="timeout") == timeouts + 1
        # The acquire and the release.
        assert _total("lock_store_calls_total", op="put", outcome="applied") == applied + 2
    finally:
        holder.close()
        waiter.close()


def test_every_metric_has_a_name_labels_a_type_and_a_value() -> None:
    client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="shape")
    try:
        with client.lock("job"):
            pass
    finally:
        client.close()
    figures = lease_lock.metrics()
    names = {metric["name"] for metric in figures}
    for name in (
        "lock_store_calls_total",
        "lock_store_call_seconds",
        "lock_acquires_total",
        "lock_acquire_seconds",
        "lock_heartbeats_total",
        "lock_locks_held",
        "lock_locks_lost_total",
        "lock_shutdown_locks_total",
    ):
        assert name in names, name
    for metric in figures:
        assert isinstance(metric["labels"], dict)
        if metric["type"] == "histogram":
            value = metric["value"]
            assert isinstance(value, dict)
            assert set(value) == {"count", "sum", "min", "max"}
            assert value["count"] == 0 or value["min"] <= value["max"]
        else:
            assert metric["type"] in ("counter", "gauge")
            assert isinstance(metric["value"], (int, float))
    latency = [m for m in figures if m["name"] == "lock_acquire_seconds" and m["labels"] == {"outcome": "acquired"}]
    assert len(latency) == 1
    assert isinstance(latency[0]["value"], dict) and latency[0]["value"]["count"] >= 1
    # Sorted by name, then labels.
    keys = [(m["name"], sorted(m["labels"].items())) for m in figures]
    assert keys == sorted(keys)
