"""Reader-writer locks and several locks at once, on every store: readers share, a writer is alone, upgrades, fences and data; all or nothing, with blocks, asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import pytest

import lease_lock
from lease_lock import LockClient

Clients = Callable[..., LockClient]


def test_readers_share_a_writer_waits_for_them_and_new_readers_wait_behind_it(clients: Clients) -> None:
    alice, bob, carol = clients("alice"), clients("bob", refresh=0.1), clients("carol", refresh=0.1)
    config = alice.rw_lock("config", 4)
    assert (config.name, config.max_readers) == ("config", 4)
    first = config.read(wait=5)
    second = bob.rw_lock("config", 4).read(wait=5)
    assert first.is_safe and second.is_safe
    assert first.fence == 0 and first.data is None, "no writer ever"
    assert first.slot != second.slot

    got: list[lease_lock.Lock] = []
    writer = threading.Thread(target=lambda: got.append(carol.rw_lock("config", 4).write(wait=10, data=b"v1")))
    writer.start()
    time.sleep(0.5)
    assert not got, "two readers inside"
    assert bob.rw_lock("config", 4).try_read() is None, "a new reader passed a waiting writer"
    first.release()
    second.release()
    writer.join(timeout=10)
    assert got, "the writer got in once the readers left"
    write = got[0]
    assert write.is_safe and write.fence >= 1
    assert config.try_read() is None
    write.release(data=b"version 7")
    with config.read(wait=5) as read:
        assert (read.fence, read.data) == (write.fence, b"version 7")
        with pytest.raises(lease_lock.InvalidInput):
            read.set_data(b"x")
    assert not read.held


def test_an_upgradeable_read_upgrades_when_the_other_readers_leave(clients: Clients) -> None:
    alice, bob = clients("alice"), clients("bob")
    lock = alice.rw_lock("doc", 3)
    upgradeable = lock.upgradeable_read(wait=5)
    reader = bob.rw_lock("doc", 3).read(wait=5)
    assert bob.rw_lock("doc", 3).try_upgradeable_read() is None
    assert bob.rw_lock("doc", 3).try_write() is None
    with pytest.raises(lease_lock.AcquireTimeout):
        upgradeable.upgrade(wait=0.5)
    assert upgradeable.held and upgradeable.is_safe, "a failed upgrade keeps the read"
    # The failed upgrade held the write lock (its record: sort key "writer")
    # for a moment: the lock's first fence.
    failed = alice.get_lock("doc", sort_key="writer")
    assert failed is not None and failed.released and failed.fence >= 1
    reader.release()
    with upgradeable.upgrade(wait=5) as write:
        assert write.is_safe and write.fence == failed.fence + 1
        assert not upgradeable.held, "the read went into the write"
        assert bob.rw_lock("doc", 3).try_read() is None
    again = bob.rw_lock("doc", 3).try_write()
    assert again is not None and again.fence == failed.fence + 2
    again.release()
    with pytest.raises(lease_lock.InvalidInput):
        lock.read(wait=5).upgrade()


def test_bad_input_is_refused_before_anything_is_written(clients: Clients) -> None:
    alice = clients("alice")
    with pytest.raises(lease_lock.InvalidInput):
        alice.rw_lock("config", 0)
    with pytest.raises(lease_lock.InvalidInput, match="readers"):
        alice.rw_lock("config", 100_000)
    with pytest.raises(TypeError):
        alice.rw_lock("config", "4")  # type: ignore[arg-type]
    read = alice.rw_lock("config", 4).read(wait=5)
    with pytest.raises(lease_lock.InvalidInput, match="reader slots"):
        alice.rw_lock("config", 8).read(wait=5)
    with pytest.raises(lease_lock.InvalidInput):
        read.release(delete=True)
    with pytest.raises(lease_lock.InvalidInput):
        read.detach()
    read.release()
    held = [info for info in alice.list_locks() if not info.released and not info.key.endswith("#readers")]
    assert held == [], held


def test_reads_and_writes_from_asyncio(clients: Clients) -> None:
    alice = clients("alice")
    lock = alice.rw_lock("settings", 2)

    async def main() -> None:
        async with await lock.write_async(wait=5) as write:
            first = write.fence
            assert first >= 1
            assert await lock.try_read_async() is None
        read = await lock.read_async(wait=5)
        assert await read.run_while_safe(asyncio.sleep(0, result="read")) == "read"
        assert await lock.try_write_async() is None
        await read.release_async()
        upgradeable = await lock.upgradeable_read_async(wait=5)
        write = await upgradeable.upgrade_async(wait=5)
        # The refused try_write held the write lock for a moment (first + 1).
        assert write.fence == first + 2
        await write.release_async()

    asyncio.run(main())


def test_several_locks_all_or_nothing(clients: Clients, store: Any) -> None:
    alice, bob = clients("alice"), clients("bob")
    blocker = bob.acquire("acct-2", wait=5)
    with pytest.raises(lease_lock.AcquireTimeout) as timed_out:
        alice.acquire_all(["acct-3", "acct-1", "acct-2"], wait=0.5)
    assert timed_out.value.key == "acct-2"
    for key in ("acct-1", "acct-3"):
        info = alice.get_lock(key)
        assert info is None or info.released or info.owner != "alice", f"{key} left held"
    # acct-1 was taken (its first fence) and let go by the failed attempt;
    # acct-3 was never written.
    let_go = alice.get_lock("acct-1")
    assert let_go is not None and let_go.released and let_go.fence >= 1
    assert alice.get_lock("acct-3") is None
    blocker.release()
    with alice.lock_all(["acct-3", "acct-1", "acct-2", "acct-1"], wait=5) as group:
        assert [lock.key for lock in group.locks] == ["acct-1", "acct-2", "acct-3"]
        fences = group.fences
        assert fences["acct-3"] >= 1
        assert fences == {"acct-1": let_go.fence + 1, "acct-2": blocker.fence + 1, "acct-3": fences["acct-3"]}
        assert group.is_safe
        # Every key free this time: in one request where the store can.
        assert group.taken_at_once == (not isinstance(store, lease_lock.BucketStore))
        assert bob.try_acquire("acct-3") is None
    assert not any(lock.held for lock in group.locks)
    assert bob.try_acquire("acct-3") is not None


def test_several_locks_from_asyncio_and_work_cancelled_when_one_is_unsafe(clients: Clients) -> None:
    alice = clients("alice")

    async def main() -> None:
        async with alice.lock_all(["a", ("b", "x")], wait=5) as group:
            assert set(group.fences) == {"a", ("b", "x")}
            assert await group.run_while_safe(asyncio.sleep(0, result=7)) == 7
        assert not group.is_safe
        group = await alice.acquire_all_async(["p", "q"], wait=5)

        async def forever() -> None:
            await asyncio.sleep(3600)

        work = asyncio.ensure_future(group.run_while_safe(forever()))
        await asyncio.sleep(0.2)
        alice.force_release("q")
        with pytest.raises(lease_lock.LockLost):
            await asyncio.wait_for(work, timeout=30)
        await group.release_async()

    asyncio.run(main())
