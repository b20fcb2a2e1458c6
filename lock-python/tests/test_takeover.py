"""Taking over a crashed holder's lock by time the store proves, from Python:
``MemoryStore(clock=True)`` keeps time as PostgreSQL does; the options that
turn each rule on and off, and the bad input they refuse. (Real processes
killed on real servers: test_takeover_drills.py.)"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import lease_lock

LEASE = 0.5


def crashed_holder(store: lease_lock.MemoryStore) -> float:
    """``job`` held by a client that then stops heartbeating, as a crashed
    process would (its record stays); when it wrote, on the monotonic clock."""
    holder = lease_lock.LockClient(store, owner="crashed", lease=LEASE)
    lock = holder.acquire("job", wait=1)
    lock.detach()
    # No write of the holder's comes after this (a heartbeat may have come
    # before): the record is no older than this says.
    written = time.monotonic()
    holder.close()
    return written


def fresh_attempt(store: lease_lock.MemoryStore, **options: object) -> lease_lock.Lock | None:
    """A fresh process's one attempt: a new client, nothing remembered."""
    client = lease_lock.LockClient(store, owner="fresh", lease=LEASE, **options)  # type: ignore[arg-type]
    try:
        return client.try_acquire("job")
    finally:
        client.close()


def past_the_lease(written: float) -> None:
    time.sleep(max(0.0, written + LEASE * 1.01 + 0.05 - time.monotonic()))


def test_a_fresh_client_takes_a_lock_whose_lease_has_passed_on_the_store_clock() -> None:
    store = lease_lock.MemoryStore(clock=True)
    written = crashed_holder(store)
    assert fresh_attempt(store) is None, "younger than its lease: busy"
    past_the_lease(written)
    lock = fresh_attempt(store)
    assert lock is not None, "the lease has passed on the store's clock"
    assert lock.fence == 2


def test_with_the_store_clock_off_or_absent_a_fresh_client_watches() -> None:
    for store, options in [
        (lease_lock.MemoryStore(clock=True), {"use_store_clock": False}),
        (lease_lock.MemoryStore(), {}),
    ]:
        written = crashed_holder(store)
        past_the_lease(written)
        assert fresh_attempt(store, **options) is None


def test_the_options_are_checked_before_anything_is_written() -> None:
    with pytest.raises(TypeError, match="use_store_clock"):
        lease_lock.LockClient(lease_lock.MemoryStore(), use_store_clock="yes")  # type: ignore[arg-type]
    with pytest.raises(lease_lock.ConfigError, match="no write time"):
        lease_lock.LockClient(lease_lock.MemoryStore(), max_clock_difference=1)
    with pytest.raises(lease_lock.InvalidInput, match="max_clock_difference"):
        lease_lock.LockClient(lease_lock.MemoryStore(clock=True), max_clock_difference=-1)
    lease_lock.LockClient(
        lease_lock.MemoryStore(clock=True), max_clock_difference=timedelta(milliseconds=200)
    ).close()


def test_a_lock_delay_leaves_a_crashed_holders_lock_alone_that_much_longer() -> None:
    store = lease_lock.MemoryStore(clock=True)
    written = crashed_holder(store)
    past_the_lease(written)
    assert fresh_attempt(store, lock_delay=2.0) is None, "within the delay"
    time.sleep(max(0.0, written + LEASE * 1.01 + 1.0 + 0.05 - time.monotonic()))
    lock = fresh_attempt(store, lock_delay=timedelta(seconds=1))
    assert lock is not None and lock.fence == 2
