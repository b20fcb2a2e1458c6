"""LockGroup: several locks held all or nothing (``LockClient.acquire_all`` / ``lock_all``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import LockLost
from ._native import Lock
from ._types import LostReason

if TYPE_CHECKING:
    from ._client import LockClient

__all__ = ["LockGroup", "LockGroupContext", "Keys"]

T = TypeVar("T")

#: Keys of a group: each a key, or a ``(key, sort_key)`` pair.
Keys = Iterable[str | tuple[str, str | None]]

logger = logging.getLogger("lease_lock")


def _pairs(keys: Keys) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for key in keys:
        if isinstance(key, str):
            pairs.append((key, None))
        elif isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
            pairs.append((key[0], key[1]))
        else:
            raise TypeError(f"a key is a str or a (key, sort_key) tuple, not {key!r}")
    return pairs


class LockGroup:
    """Locks held together, taken all or nothing, released together.

    ``locks`` are the member ``Lock``s in key order (each with its own fence);
    ``is_safe`` is true while every member's lease is. Release with
    ``release()`` (or leave the ``with`` block): members are released in
    reverse order, each tried even if one fails.
    """

    __slots__ = ("_locks", "_at_once")

    def __init__(self, locks: list[Lock], at_once: bool = False) -> None:
        self._locks = tuple(locks)
        self._at_once = at_once

    @property
    def taken_at_once(self) -> bool:
        """Whether the set was taken in one atomic request (a store with
        transactions, every key free), rather than key by key."""
        return self._at_once

    @property
    def locks(self) -> tuple[Lock, ...]:
        """The member locks, in key order."""
        return self._locks

    @property
    def fences(self) -> dict[str | tuple[str, str], int]:
        """Each key's fence (keys with a sort key as ``(key, sort_key)``)."""
        return {
            (lock.key if lock.sort_key is None else (lock.key, lock.sort_key)): lock.fence
            for lock in self._locks
        }

    @property
    def is_safe(self) -> bool:
        """True while every member's lease is safe."""
        return all(lock.is_safe for lock in self._locks)

    async def until_unsafe(self) -> LostReason:
        """Resolves with why, the moment the first member is no longer safe."""
        waits = [asyncio.ensure_future(lock.until_unsafe()) for lock in self._locks]
        if not waits:
            return LostReason(kind="released", owner=None, limit=None, message="the group holds no lock")
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            reason: LostReason = next(iter(done)).result()
            return reason
        finally:
            for wait in waits:
                wait.cancel()

    async def run_while_safe(self, work: Awaitable[T]) -> T:
        """Run ``work`` and return its result; cancel it the moment any member is no
        longer safe, then raise ``LockLost``."""
        task = asyncio.ensure_future(work)
        unsafe = asyncio.ensure_future(self.until_unsafe())
        try:
            await asyncio.wait({task, unsafe}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            reason = unsafe.result()
            names = ", ".join(lock.key for lock in self._locks)
            raise LockLost(
                f"a lock of the group {names} is no longer safe ({reason}); the work under it was cancelled",
                key=names,
                sort_key=None,
                reason=reason,
            )
        finally:
            unsafe.cancel()
            if not task.done():
                task.cancel()

    def release(self) -> None:
        """Release every member, in reverse key order; raise the first failure
        after every release was tried."""
        first: BaseException | None = None
        for lock in reversed(self._locks):
            try:
                lock.release()
            except Exception as error:  # noqa: BLE001 - the first one is raised below
                first = first or error
        if first is not None:
            raise first

    async def release_async(self) -> None:
        """``release``, awaited."""
        first: BaseException | None = None
        for lock in reversed(self._locks):
            try:
                await lock.release_async()
            except Exception as error:  # noqa: BLE001 - the first one is raised below
                first = first or error
        if first is not None:
            raise first

    def __enter__(self) -> LockGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.release()
            return
        try:
            self.release()
        except Exception:
            logger.exception("releasing a lock group after an exception in its block failed")

    async def __aenter__(self) -> LockGroup:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.release_async()
            return
        try:
            await self.release_async()
        except Exception:
            logger.exception("releasing a lock group after an exception in its block failed")

    def __repr__(self) -> str:
        keys = ", ".join(str(lock.key) for lock in self._locks)
        return f"<LockGroup [{keys}] {'safe' if self.is_safe else 'not safe'}>"


class LockGroupContext:
    """What ``LockClient.lock_all`` returns: acquires every key on entry, releases on exit."""

    __slots__ = ("_client", "_arguments", "_group")

    def __init__(self, client: LockClient, arguments: dict[str, Any]) -> None:
        self._client = client
        self._arguments = arguments
        self._group: LockGroup | None = None

    def __enter__(self) -> LockGroup:
        self._group = self._client.acquire_all(**self._arguments)
        return self._group

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> LockGroup:
        self._group = await self._client.acquire_all_async(**self._arguments)
        return self._group

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(exc_type, exc, tb)
