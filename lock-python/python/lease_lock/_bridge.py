"""How the Rust runtime completes asyncio futures, and running work while a lease is safe."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import LockLost

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._native import Election, Leadership, Lock

T = TypeVar("T")


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete ``future`` (on its event loop's thread) unless it was cancelled."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def run_while_safe(lock: Lock | Leadership, work: Awaitable[T]) -> T:
    """Run ``work`` and return its result; cancel it the moment the lease is no longer safe.

    Raises ``LockLost`` (after the cancelled work has finished unwinding) when,
    before ``work`` ends, the lease is in danger (no heartbeat confirmed within
    the safe time), lost, or the lock is released. While ``work`` runs, a
    release of the lock (from any thread) reads as released at once, which
    cancels ``work`` here, and waits for it to finish unwinding before the
    release is written: nothing runs under the lock once another holder may
    have it.
    """
    # Counted as running before anything of it runs, so a release that
    # begins from now on waits for it.
    running = lock._begin_work()
    task: asyncio.Future[T] | None = None
    unsafe: asyncio.Future[Any] | None = None
    try:
        if not lock.is_safe:
            # Let go (or in danger) already: not one step of the work runs.
            _close(work)
            reason = await lock.until_unsafe()
            raise LockLost(
                f"lock {lock.key} is no longer safe ({reason}); the work under it was not started",
                key=lock.key,
                sort_key=lock.sort_key,
                reason=reason,
            )
        unsafe = asyncio.ensure_future(lock.until_unsafe())
        task = asyncio.ensure_future(work)
        await asyncio.wait({task, unsafe}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        reason = unsafe.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise LockLost(
            f"lock {lock.key} lost: {reason}; the work under it was cancelled",
            key=lock.key,
            sort_key=lock.sort_key,
            reason=reason,
        )
    finally:
        try:
            if unsafe is not None:
                unsafe.cancel()
            if task is not None and not task.done():
                task.cancel()
                # A release waits for the work: let it unwind first (this
                # coroutine itself was cancelled, or raised).
                await asyncio.gather(task, return_exceptions=True)
        finally:
            running.end()


def _close(work: Awaitable[Any]) -> None:
    """Close a coroutine that will never run (no "never awaited" warning)."""
    close = getattr(work, "close", None)
    if close is not None:
        close()


async def at_exit(leaving: Awaitable[object], raised: bool, what: str) -> bool:
    """Await ``leaving`` (a release or a resignation) on leaving an ``async with`` block.

    A failure is raised, unless the block raised: then it is logged with its
    traceback to the ``lease_lock`` logger and the block's exception goes on.
    Returns False: the block's exception is never swallowed.
    """
    try:
        await leaving
    except Exception:
        if not raised:
            raise
        logging.getLogger("lease_lock").warning("%s after an exception in its block failed", what, exc_info=True)
    return False


async def ready(value: T) -> T:
    """``value``, as an awaitable (what ``async with`` on a ready object awaits)."""
    return value


async def lead(election: Election, work: Callable[[Leadership], Awaitable[T]]) -> T:
    """Wait until ``election`` leads, then run ``work(leadership)`` while the leadership is safe."""
    leadership = await election.leadership_async()
    # Without a timeout it returns only a leadership (or raises).
    assert leadership is not None
    return await run_while_safe(leadership, work(leadership))
