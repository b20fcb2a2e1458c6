"""The client's API on every store: acquire, release, fences, waits, data, keys, listing, errors."""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import Any, Callable

import pytest

import lease_lock
from lease_lock import LockClient

Clients = Callable[..., LockClient]


def test_fences_rise_and_a_held_lock_is_busy(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    lock = alice.acquire("report")
    assert (lock.key, lock.sort_key, lock.owner) == ("report", None, "alice")
    first = lock.fence
    assert first >= 1
    assert lock.held and lock.is_safe and lock.state is lease_lock.LeaseState.SAFE
    assert 0 < lock.remaining <= alice.lease
    assert bob.try_acquire("report") is None
    lock.release()
    assert not lock.held
    lock.release()  # twice does nothing
    again = bob.acquire("report", wait=0)
    assert again.fence == first + 1 and again.owner == "bob"
    again.release()


def test_with_block_releases_and_lets_its_exception_through(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    with pytest.raises(ZeroDivisionError):
        with alice.lock("job", wait=5) as lock:
            first = lock.fence
            assert first >= 1
            1 / 0
    with bob.lock("job", wait=0) as lock:
        assert lock.fence == first + 1
    info = alice.get_lock("job")
    assert info is not None and info.released and info.owner == "bob"


def test_acquire_times_out_naming_the_holder(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob", refresh=0.05)
    held = alice.acquire("busy")
    started = time.monotonic()
    with pytest.raises(lease_lock.AcquireTimeout) as raised:
        bob.acquire("busy", wait=timedelta(milliseconds=300))
    assert time.monotonic() - started >= 0.3
    error = raised.value
    assert isinstance(error, TimeoutError) and isinstance(error, lease_lock.LockError)
    assert error.retryable and error.holder == "alice" and error.key == "busy"
    assert "held by alice" in str(error)
    held.release()


def test_a_waiting_acquire_gets_the_lock_when_it_is_released(clients: Clients) -> None:
    import threading

    alice, bob = clients("alice"), clients("bob", refresh=0.05)
    held = alice.acquire("handoff")
    first = held.fence
    threading.Timer(0.2, held.release).start()
    got: list[lease_lock.Lock] = []
    # wait=inf (no limit), watched from here so that a broken hand-off fails
    # the test instead of hanging it.
    waiter = threading.Thread(target=lambda: got.append(bob.acquire("handoff", wait=math.inf)), daemon=True)
    waiter.start()
    waiter.join(timeout=15)
    assert got and got[0].fence == first + 1
    got[0].release()


def test_sort_keys_are_separate_locks(clients: Clients) -> None:
    alice = clients("alice")
    a = alice.acquire("tenant", sort_key="a")
    b = alice.acquire("tenant", sort_key="b")
    assert (a.sort_key, b.sort_key) == ("a", "b")
    assert sorted(alice.held_keys()) == [("tenant", "a"), ("tenant", "b")]
    partition = alice.list_locks(partition="tenant")
    assert sorted(info.sort_key or "" for info in partition) == ["a", "b"]
    assert all(info.held_by_this_client for info in partition)
    a.release()
    b.release()


def test_data_is_stored_with_the_lock_and_left_for_the_next_holder(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    lock = alice.acquire("checkpoint", data=b"step 1")
    assert lock.data == b"step 1"
    lock.set_data(bytearray(b"step 2"))
    assert lock.data == b"step 2"
    lock.release(data=b"done")
    info = bob.get_lock("checkpoint")
    assert info is not None and info.data == b"done"
    with pytest.raises(TypeError, match="encode"):
        bob.acquire("checkpoint", data="text")  # type: ignore[arg-type]


def test_a_lock_whose_holder_stopped_heartbeating_is_taken_over(clients: Clients) -> None:
    # max_hold stops heartbeats without releasing: the holder looks crashed.
    alice = clients("alice", lease=1, heartbeat=0.2)
    bob = clients("bob", refresh=0.1)
    crashed = alice.acquire("job", data=b"half done", max_hold=0.3)
    assert crashed.wait_unsafe(timeout=5) is not None
    reason = crashed.lost_reason
    assert reason is not None and reason.kind == "max_hold" and reason.limit == pytest.approx(0.3)
    lock = bob.acquire("job", wait=10)
    assert crashed.fence >= 1
    assert lock.took_over == lease_lock.Takeover(owner="alice", fence=crashed.fence, data=b"half done")
    assert lock.fence == crashed.fence + 1
    lock.release()


def test_per_lock_lease_and_listing(clients: Clients) -> None:
    alice = clients("alice")
    lock = alice.acquire("short", lease=timedelta(seconds=3))
    assert lock.lease == 3.0
    listed = {info.key: info for info in alice.list_locks()}
    assert listed["short"].lease == 3.0 and not listed["short"].released
    lock.release()


def test_force_release_steals_and_the_holder_learns_it(clients: Clients) -> None:
    # A lease long enough that a slow round trip never puts it in danger
    # first: the steal is seen on the next heartbeat.
    alice = clients("alice", lease=5, heartbeat=0.1)
    ops = clients("ops")
    lock = alice.acquire("stuck")
    before = ops.force_release("stuck")
    assert before is not None and before.owner == "alice"
    reason = lock.wait_unsafe(timeout=5)
    assert reason is not None and reason.kind == "stolen"
    assert lock.state is lease_lock.LeaseState.LOST
    with pytest.raises(lease_lock.LockLost):
        lock.release()


def test_close_releases_and_later_calls_raise(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    held = alice.acquire("a")
    report = alice.close()
    assert report["released"] == [("a", None)] and report["failed"] == []
    assert not held.held and not held.is_safe  # close released it
    assert alice.close()["released"] == []
    with pytest.raises(lease_lock.ClientClosed):
        alice.acquire("b")
    lock = bob.acquire("a", wait=0)
    assert lock.fence == held.fence + 1
    lock.release()


def test_bad_input_is_refused_before_anything_is_written(clients: Clients, store: Any) -> None:
    alice = clients("alice")
    with pytest.raises(lease_lock.InvalidInput, match="zero or more"):
        alice.acquire("k", wait=-1)
    with pytest.raises(TypeError, match="timedelta"):
        alice.acquire("k", wait="5s")  # type: ignore[arg-type]
    with pytest.raises(lease_lock.ConfigError) as raised:
        alice.acquire("k", min_hold=10, max_hold=5)
    assert isinstance(raised.value, ValueError) and "min hold" in str(raised.value)
    with pytest.raises(lease_lock.ConfigError, match="heartbeat period"):
        LockClient(store, lease=1, heartbeat=2)
    with pytest.raises(lease_lock.ConfigError, match="try_acquire"):
        alice._native.acquire("k", None, True, False, 5.0, None, None, None, None, None, False, False, False, False, None)
    assert alice.list_locks() == []


def test_an_outage_puts_the_lease_in_danger_and_a_landed_heartbeat_makes_it_safe_again() -> None:
    store = lease_lock.MemoryStore()
    # Safe for 4 × 0.99 − 2 = 1.96 s after the last heartbeat; expired at 4 s.
    alice = LockClient(store, owner="alice", lease=4, heartbeat=0.2, safety_margin=2)
    lock = alice.acquire("job")
    store.set_unavailable(True)
    reason = lock.wait_unsafe(timeout=timedelta(seconds=5))
    assert reason is not None and reason.kind == "in_danger"
    assert lock.state is lease_lock.LeaseState.IN_DANGER and not lock.is_safe
    store.set_unavailable(False)
    import conftest

    conftest.eventually(lambda: lock.is_safe, timeout=5, what="a heartbeat landing")
    assert lock.state is lease_lock.LeaseState.SAFE and lock.fence == 1
    lock.release()
    assert len(store) == 1
    alice.close()


def test_a_detached_lock_stays_held_until_released_by_its_version(clients: Clients) -> None:
    alice, bob = clients("alice", lease=4, heartbeat=0.5), clients("bob")
    lock = alice.acquire("handover")
    first = lock.version
    assert first == alice.get_lock("handover").version  # type: ignore[union-attr]
    time.sleep(0.8)
    assert lock.version != first, "a heartbeat writes a new version"
    version = lock.detach()
    assert version == lock.version and not lock.held
    assert alice.held_keys() == []
    time.sleep(1.0)
    info = bob.get_lock("handover")
    assert info is not None and info.version == version and not info.released, "no heartbeat, no release"
    assert bob.try_acquire("handover") is None
    with pytest.raises(lease_lock.InvalidInput):
        lock.detach()  # twice: nothing left to detach
    with pytest.raises(lease_lock.NotOwned):
        bob.release_version("handover", "not-its-version")
    released = bob.release_version("handover", version)
    assert released.owner == "alice" and released.version == version
    assert bob.acquire("handover", wait=0).fence == lock.fence + 1


def test_a_heartbeat_rate_limit_is_taken_and_checked(clients: Clients) -> None:
    client = clients("limited", heartbeat_rate_limit=50)
    client.acquire("a").release()
    for bad in (0, -1, 2**32):
        with pytest.raises(lease_lock.ConfigError, match="heartbeat_rate_limit"):
            clients("bad", heartbeat_rate_limit=bad)
    # Not a number of heartbeats at all: a TypeError, as for any argument
    # of the wrong type.
    for wrong in (2.5, True, "50"):
        with pytest.raises(TypeError, match="heartbeat_rate_limit must be an int"):
            clients("bad", heartbeat_rate_limit=wrong)


def test_data_takes_bytes_bytearray_and_memoryview_everywhere(clients: Clients) -> None:
    alice = clients("alice")
    for data in (b"ab", bytearray(b"ab"), memoryview(b"xaby")[1:3]):
        lock = alice.acquire("job", data=data)
        assert lock.data == b"ab"
        lock.set_data(data)
        assert lock.data == b"ab"
        lock.release(data=data)
        info = alice.get_lock("job")
        assert info is not None and info.data == b"ab"
        permit = alice.semaphore("pool", 2).acquire(data=data)
        assert permit.data == b"ab"
        permit.release(data=data)
    with pytest.raises(TypeError, match="data must be bytes"):
        alice.acquire("job").set_data("text")  # type: ignore[arg-type]


def test_every_exception_has_its_attributes_and_pickles_with_them() -> None:
    import pickle

    bare = lease_lock.AcquireTimeout("x")
    assert (bare.holder, bare.waited, bare.key, bare.sort_key, bare.retryable) == (None, None, None, None, False)
    assert lease_lock.StoreError("x").kind is None
    assert lease_lock.LockLost("x").reason is None
    made = lease_lock.AcquireTimeout("busy", retryable=True, key="k", sort_key=None, holder="bob", waited=1.5)
    back = pickle.loads(pickle.dumps(made))
    assert type(back) is lease_lock.AcquireTimeout and isinstance(back, TimeoutError)
    assert (str(back), back.message, back.retryable, back.key, back.holder, back.waited) == (
        "busy", "busy", True, "k", "bob", 1.5,
    )


def test_an_error_raised_by_the_client_pickles_with_its_attributes(clients: Clients) -> None:
    import pickle

    alice, bob = clients("alice"), clients("bob")
    held = alice.acquire("job")
    with pytest.raises(lease_lock.AcquireTimeout) as raised:
        bob.acquire("job", wait=0.05)
    back = pickle.loads(pickle.dumps(raised.value))
    assert back.holder == "alice" and back.key == "job" and back.retryable
    held.release()


def test_a_lock_context_nests_and_is_shared_between_tasks(clients: Clients) -> None:
    import asyncio

    alice, bob = clients("alice"), clients("bob")
    context = alice.lock("job", reentrant=True)
    with context as outer:
        with context as inner:
            assert inner.fence == outer.fence
        assert outer.held and outer.is_safe, "the inner exit released only its own guard"
    assert not outer.held
    assert bob.try_acquire("job") is not None

    shared = alice.lock("shared", reentrant=True)

    async def main() -> None:
        entered: list[lease_lock.Lock] = []
        first_in = asyncio.Event()

        async def task(pause: float, after: asyncio.Event | None) -> None:
            if after is not None:
                # Enter while the first task holds it: a reentrant entry.
                await after.wait()
            async with shared as lock:
                entered.append(lock)
                first_in.set()
                await asyncio.sleep(pause)

        # Both inside at once; the first to enter leaves first.
        await asyncio.gather(task(0.05, None), task(0.1, first_in))
        assert len(entered) == 2 and not any(lock.held for lock in entered)

    asyncio.run(asyncio.wait_for(main(), timeout=30))
    taken = bob.try_acquire("shared")
    assert taken is not None, "both tasks' exits released their own guards"
    taken.release()


def test_a_failed_release_or_resignation_after_the_block_raised_is_logged_and_the_block_error_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One rule for Lock, LockContext and Election, blocking and async.

    Each exit fails only after its retries (seconds), so the three of a
    phase run at once: in threads, then in tasks.
    """
    import asyncio
    import logging
    import threading

    store = lease_lock.MemoryStore()
    client = LockClient(store, owner="a", lease=2)

    def failing_exits(phase: str) -> list[Any]:
        # Keys of their own: a lock whose release failed stays held for its lease.
        return [
            lambda: client.acquire(f"lock-{phase}", wait=0),
            lambda: client.lock(f"context-{phase}", wait=0),
            lambda: client.elect(f"election-{phase}"),
        ]

    def logged_failures() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "after an exception in its block failed" in r.getMessage()]

    entered_all = threading.Barrier(3)
    outcomes: list[str] = []

    def blocking(enter: Any) -> None:
        try:
            with enter() as entered:
                if isinstance(entered, lease_lock.Election):
                    assert entered.leadership(timeout=5) is not None
                entered_all.wait(timeout=10)
                store.set_unavailable(True)
                raise KeyError("the block's own error")
        except KeyError:
            outcomes.append("the block's error")

    with caplog.at_level(logging.WARNING, logger="lease_lock"):
        threads = [threading.Thread(target=blocking, args=(enter,)) for enter in failing_exits("blocking")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    store.set_unavailable(False)
    assert outcomes == ["the block's error"] * 3
    assert len(logged_failures()) == 3 and all(r.exc_info is not None for r in logged_failures()), caplog.text
    caplog.clear()

    async def one(enter: Any, all_in: asyncio.Barrier) -> None:
        with pytest.raises(KeyError):
            async with enter() as entered:
                if isinstance(entered, lease_lock.Election):
                    assert await entered.leadership_async(timeout=5) is not None
                await all_in.wait()
                store.set_unavailable(True)
                raise KeyError("the block's own error")

    async def main() -> None:
        all_in = asyncio.Barrier(3)
        await asyncio.gather(*(one(enter, all_in) for enter in failing_exits("async")))

    with caplog.at_level(logging.WARNING, logger="lease_lock"):
        asyncio.run(asyncio.wait_for(main(), timeout=60))
    store.set_unavailable(False)
    assert len(logged_failures()) == 3 and all(r.exc_info is not None for r in logged_failures()), caplog.text
    client.close()
