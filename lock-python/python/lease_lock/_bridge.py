"""How the Rust runtime completes asyncio futures, and running work until a lease is lost."""

from __future__ import annotations

import asyncio
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


async def run_until_lost(lock: Lock | Leadership, work: Awaitable[T]) -> T:
    """Run ``work`` and return its result; cancel it as soon as the lease can no longer be trusted.

    Raises ``LockLost`` (after the cancelled work has finished unwinding) when,
    before ``work`` ends, the lease is in danger (no heartbeat confirmed within
    the safe time), lost, or the lock is released.
    """
    task = asyncio.ensure_future(work)
    lost: asyncio.Future[Any] = asyncio.ensure_future(lock.lost())
    try:
        await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        reason = lost.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise LockLost(
            f"lock {lock.key} lost: {reason}; the work under it was cancelled",
            key=lock.key,
            sort_key=lock.sort_key,
            reason=reason,
        )
    finally:
        lost.cancel()
        if not task.done():
            task.cancel()


async def ready(value: T) -> T:
    """``value``, as an awaitable (what ``async with`` on a ready object awaits)."""
    return value


async def lead(election: Election, work: Callable[[Leadership], Awaitable[T]]) -> T:
    """Wait until ``election`` leads, then run ``work(leadership)`` until it ends or the leadership is lost."""
    leadership = await election.leadership_async()
    # Without a timeout it returns only a leadership (or raises).
    assert leadership is not None
    return await run_until_lost(leadership, work(leadership))
