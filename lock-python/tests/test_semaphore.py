"""Counting semaphores on every store: at most N permits, waiting, releasing, with blocks, asyncio, the count checked."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import pytest

import lease_lock
from lease_lock import LockClient

Clients = Callable[..., LockClient]


def test_at_most_permits_holders_and_a_waiter_gets_a_released_permit(clients: Clients) -> None:
    alice, bob, carol = clients("alice"), clients("bob", refresh=0.1), clients("carol")
    exports = alice.semaphore("exports", 2)
    assert (exports.name, exports.permits) == ("exports", 2)
    first = exports.acquire(wait=5)
    second = exports.acquire(wait=5)
    assert {first.slot, second.slot} == {0, 1}
    assert first.fence >= 1 and first.held and first.is_safe
    assert bob.semaphore("exports", 2).try_acquire() is None
    with pytest.raises(lease_lock.AcquireTimeout):
        carol.semaphore("exports", 2).acquire(wait=0.3)

    got: list[lease_lock.Lock] = []
    waiting = threading.Thread(target=lambda: got.append(bob.semaphore("exports", 2).acquire(wait=10)))
    waiting.start()
    time.sleep(0.3)
    slot = first.slot
    first.release()
    waiting.join(timeout=10)
    assert got and got[0].slot == slot and got[0].fence == first.fence + 1
    got[0].release()
    second.release()


def test_with_blocks_asyncio_and_data(clients: Clients) -> None:
    alice = clients("alice")
    jobs = alice.semaphore("jobs", 1)
    with jobs.acquire(wait=5, data=b"checkpoint-1") as permit:
        assert permit.slot == 0 and permit.data == b"checkpoint-1"
    assert not permit.held

    async def main() -> None:
        permit = await jobs.acquire_async(wait=5)
        assert permit.slot == 0
        assert await jobs.try_acquire_async() is None
        assert await permit.run_while_safe(asyncio.sleep(0, result="done")) == "done"
        await permit.release_async()
        again = await jobs.try_acquire_async()
        assert again is not None
        await again.release_async()
        with pytest.raises(lease_lock.InvalidInput):
            again.release(delete=True)

    asyncio.run(asyncio.wait_for(main(), timeout=30))


def test_another_count_and_bad_input_are_refused(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    held = alice.semaphore("pool", 3).acquire(wait=5)
    with pytest.raises(lease_lock.LockError) as raised:
        bob.semaphore("pool", 4).acquire(wait=5)
    assert "has 3 permits in the store, not 4" in str(raised.value)
    assert not raised.value.retryable
    held.release()
    with pytest.raises(lease_lock.InvalidInput):
        alice.semaphore("pool", 0)
    with pytest.raises(lease_lock.InvalidInput):
        alice.semaphore("pool", 1001)
    with pytest.raises(TypeError):
        alice.semaphore("pool", "3")  # type: ignore[arg-type]
