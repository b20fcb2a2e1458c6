"""The asyncio API: awaitable calls, async with, cancellation, until_unsafe() and run_while_safe."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest

import lease_lock
from lease_lock import LockClient

Clients = Callable[..., LockClient]


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def test_async_with_and_awaitable_calls(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")

    async def main() -> None:
        async with alice.lock("report", wait=5, data=b"v1") as lock:
            first = lock.fence
            assert first >= 1
            assert await bob.try_acquire_async("report") is None
            await lock.set_data_async(b"v2")
            info = await bob.get_lock_async("report")
            assert info is not None and info.data == b"v2" and not info.released
        lock = await bob.acquire_async("report", wait=0)
        assert lock.fence == first + 1
        assert [info.key for info in await bob.list_locks_async()] == ["report"]
        await lock.release_async()
        report = await alice.close_async()
        assert report["released"] == []

    run(main())


def test_an_exception_in_async_with_propagates_and_the_lock_is_released(clients: Clients) -> None:
    alice = clients("alice")

    async def main() -> None:
        with pytest.raises(KeyError):
            async with alice.lock("job") as held:
                raise KeyError("boom")
        lock = await alice.try_acquire_async("job")
        assert lock is not None and lock.fence == held.fence + 1
        await lock.release_async()

    run(main())


def test_a_cancelled_acquire_leaves_nothing_held(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob", refresh=0.05)

    async def main() -> None:
        held = await alice.acquire_async("busy")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(bob.acquire_async("busy", wait=60), timeout=0.3)
        await held.release_async()
        # The cancelled acquire must not take the lock after the release.
        await asyncio.sleep(0.3)
        info = await alice.get_lock_async("busy")
        assert info is not None and info.released and info.owner == "alice"
        assert bob.held_keys() == []

    run(main())


def test_until_unsafe_resolves_when_the_lock_is_stolen(clients: Clients) -> None:
    alice = clients("alice", lease=5, heartbeat=0.1)
    ops = clients("ops")

    async def main() -> None:
        lock = await alice.acquire_async("stuck")
        waiter = asyncio.ensure_future(lock.until_unsafe())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await ops.force_release_async("stuck")
        reason = await asyncio.wait_for(waiter, timeout=5)
        assert reason.kind == "stolen" and reason.owner == "ops"

    run(main())


def test_run_while_safe_cancels_the_work_when_the_lease_is_lost(clients: Clients) -> None:
    alice = clients("alice", lease=5, heartbeat=0.1)
    ops = clients("ops")
    cancelled = []

    async def work() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "finished"

    async def quick() -> str:
        return "quick"

    async def main() -> None:
        lock = await alice.acquire_async("job")
        assert await lock.run_while_safe(quick()) == "quick"
        asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(ops.force_release_async("job")))
        with pytest.raises(lease_lock.LockLost) as raised:
            await lock.run_while_safe(work())
        assert raised.value.reason.kind == "stolen"
        assert cancelled == [True]

    run(main())


def test_run_while_safe_cancels_the_work_when_the_lease_falls_into_danger() -> None:
    store = lease_lock.MemoryStore()
    alice = LockClient(store, owner="alice", lease=4, heartbeat=0.2, safety_margin=2)

    async def main() -> None:
        lock = await alice.acquire_async("job")
        loop = asyncio.get_running_loop()
        started = loop.time()
        store.set_unavailable(True)
        with pytest.raises(lease_lock.LockLost) as raised:
            await lock.run_while_safe(asyncio.sleep(60))
        # Cancelled at the end of the safe time, well before the lease ends.
        assert raised.value.reason.kind == "in_danger"
        assert loop.time() - started < 3.5
        store.set_unavailable(False)

    run(main())
    alice.close()


def test_a_release_from_another_thread_waits_for_run_while_safe_work_to_unwind() -> None:
    """The release reads as released at once, cancels the work, and is written only after it unwound."""
    import threading

    alice = LockClient(lease_lock.MemoryStore(), owner="alice")
    seen: dict[str, Any] = {}

    async def work(lock: lease_lock.Lock) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["safe_when_cancelled"] = lock.is_safe
            # Still unwinding: the release has not been written yet.
            await asyncio.sleep(0.2)
            info = alice.get_lock("job")
            seen["released_while_unwinding"] = info is not None and info.released
            raise

    async def main() -> None:
        lock = await alice.acquire_async("job")
        releaser = threading.Timer(0.1, lock.release)
        releaser.start()
        with pytest.raises(lease_lock.LockLost) as raised:
            await lock.run_while_safe(work(lock))
        assert raised.value.reason.kind == "released"
        releaser.join(5)
        assert not releaser.is_alive()

    run(main())
    assert seen == {"safe_when_cancelled": False, "released_while_unwinding": False}
    info = alice.get_lock("job")
    assert info is not None and info.released
    alice.close()


def test_the_old_signal_names_warn_and_keep_their_meaning(clients: Clients) -> None:
    """lost(), wait_lost(), run_until_lost() and on_lost= still mean "no longer safe", with a DeprecationWarning."""
    alice = clients("alice")
    called: list[Any] = []

    async def main() -> None:
        with pytest.warns(DeprecationWarning, match="on_lost= is deprecated"):
            lock = await alice.acquire_async("job", on_lost=called.append)
        with pytest.raises(TypeError, match="on_unsafe= only"):
            await alice.acquire_async("other", on_unsafe=called.append, on_lost=called.append)
        with pytest.warns(DeprecationWarning, match="run_while_safe"):
            assert await lock.run_until_lost(asyncio.sleep(0, result=7)) == 7
        with pytest.warns(DeprecationWarning, match=r"Lock\.lost\(\) is deprecated"):
            waiter = asyncio.ensure_future(lock.lost())
        with pytest.warns(DeprecationWarning, match=r"Lock\.wait_lost\(\) is deprecated"):
            assert lock.wait_lost(timeout=0.01) is None
        assert lock.wait_unsafe(timeout=0.01) is None
        ended = asyncio.ensure_future(lock.until_ended())
        await lock.release_async()
        reason = await asyncio.wait_for(waiter, timeout=5)
        assert reason.kind == "released"
        assert (await asyncio.wait_for(ended, timeout=5)).kind == "released"
        assert lock.wait_ended(timeout=0) is not None

    run(main())
    # Released by this process: not a loss to report.
    assert called == []


def test_a_blocking_release_on_the_loop_running_work_under_the_lock_is_refused_before_it_writes() -> None:
    """It would freeze the loop for a lease (the release waits for work only that loop can end)."""
    alice = LockClient(lease_lock.MemoryStore(), owner="alice")

    async def main() -> tuple[lease_lock.Lock, Any]:
        lock = await alice.acquire_async("job")
        work = asyncio.ensure_future(lock.run_while_safe(asyncio.sleep(60)))
        await asyncio.sleep(0.05)
        with pytest.raises(RuntimeError, match="release_async|_async twin"):
            lock.release()
        with pytest.raises(RuntimeError, match="_async twin"):
            alice.close()
        # Nothing was written or let go.
        assert lock.held and lock.is_safe
        await lock.release_async()
        with pytest.raises(lease_lock.LockLost):
            await work
        info = await alice.get_lock_async("job")
        assert info is not None and info.released
        # Work on a loop that is not running can never resume: a blocking
        # call from its thread does not wait for it.
        other = await alice.acquire_async("other")
        stuck = other._begin_work()
        return other, stuck

    other, stuck = asyncio.run(asyncio.wait_for(main(), timeout=30))
    started = time.monotonic()
    other.release()
    assert time.monotonic() - started < 5
    info = alice.get_lock("other")
    assert info is not None and info.released
    del stuck
    alice.close()


def test_a_lock_supports_async_with(clients: Clients) -> None:
    alice = clients("alice")

    async def main() -> None:
        async with await alice.acquire_async("job") as lock:
            assert lock.held and lock.fence >= 1
        assert not lock.held
        info = await alice.get_lock_async("job")
        assert info is not None and info.released and info.fence == lock.fence
        # The block's exception goes on; the lock is released.
        with pytest.raises(KeyError):
            async with await alice.acquire_async("job") as again:
                raise KeyError("boom")
        assert not again.held

    run(main())


def test_release_async_outside_an_event_loop_raises_before_doing_anything(clients: Clients) -> None:
    alice = clients("alice")
    lock = alice.acquire("job")
    with pytest.raises(RuntimeError, match="no running event loop"):
        lock.release_async()
    assert lock.held and lock.is_safe
    info = alice.get_lock("job")
    assert info is not None and not info.released
    lock.release()


def test_wait_role_change_has_an_awaitable_twin(clients: Clients) -> None:
    alice = clients("alice")

    async def main() -> None:
        election = alice.elect("leader")
        assert await election.leadership_async(timeout=5) is not None
        # No change while it leads: None after the timeout.
        assert await election.wait_role_change_async(timeout=0.05) is None
        # Watching from the call on, so the change the resignation makes is seen.
        change = election.wait_role_change_async(timeout=5)
        await election.resign_async()
        role = await change
        assert role is not None and role.kind == "campaigning"

    run(main())


def test_cancelling_inside_async_with_or_during_its_exit_still_releases() -> None:
    store = lease_lock.MemoryStore()
    alice = LockClient(store, owner="alice")

    async def main() -> None:
        # Cancelled in the body: the exit releases.
        entered = asyncio.Event()

        async def body() -> None:
            async with alice.lock("body"):
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.ensure_future(body())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        info = await alice.get_lock_async("body")
        assert info is not None and info.released

        # Cancelled while the exit's release waits for a store that is down:
        # the release goes on, and lands once the store is back.
        exiting = asyncio.Event()

        async def slow_exit() -> None:
            async with alice.lock("exit"):
                store.set_unavailable(True)
                exiting.set()

        task = asyncio.ensure_future(slow_exit())
        await exiting.wait()
        await asyncio.sleep(0.1)  # inside __aexit__, retrying
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        store.set_unavailable(False)
        for _ in range(100):
            info = await alice.get_lock_async("exit")
            if info is not None and info.released:
                break
            await asyncio.sleep(0.05)
        assert info is not None and info.released

    run(main())
    alice.close()
