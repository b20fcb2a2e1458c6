"""LockClient: acquire, hold and release locks on a store, from threads or asyncio."""

from __future__ import annotations

import contextvars
import logging
import warnings
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, Union

from . import _events, _native
from ._errors import ConfigError, InvalidInput
from ._group import Keys, LockGroup, LockGroupContext, _pairs
from ._native import (
    BucketStore,
    DynamoDBStore,
    Election,
    EtcdStore,
    Lock,
    MemoryStore,
    PostgresStore,
    RedisStore,
    Semaphore,
)
from ._rw import RwLock
from ._types import LockInfo, LostReason, Seconds

__all__ = ["LockClient", "LockContext", "Store"]

#: The stores a client runs on.
Store = Union[MemoryStore, DynamoDBStore, PostgresStore, BucketStore, EtcdStore, RedisStore]

logger = logging.getLogger("lease_lock")


def _seconds(name: str, value: Seconds | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    # Any real number (numpy's too), but not a bool or a string.
    if not isinstance(value, (bool, str, bytes)) and hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"{name} must be seconds (int or float) or a datetime.timedelta, not {type(value).__name__}")


def _on_unsafe(
    on_unsafe: Callable[[LostReason], object] | None,
    on_lost: Callable[[LostReason], object] | None,
) -> Callable[[LostReason], object] | None:
    """The ``on_unsafe`` callback, from its deprecated name ``on_lost`` too."""
    if on_lost is None:
        return on_unsafe
    if on_unsafe is not None:
        raise TypeError("pass on_unsafe= only: on_lost= is its deprecated name")
    warnings.warn(
        "on_lost= is deprecated: it is called when the lease is no longer safe (in danger or lost); "
        "pass the same callback as on_unsafe=",
        DeprecationWarning,
        stacklevel=3,
    )
    return on_lost


def _bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"data must be bytes, not {type(value).__name__} (encode a str with .encode())")


class LockClient:
    """A lock client on one store: acquires locks, heartbeats them, releases them.

    ``owner`` is written into every lock (default: host name and a random
    suffix); ``lease`` is how long a lock stays held without a heartbeat
    (default 20 s), ``heartbeat`` how often it is renewed (default a quarter
    of the lease), ``refresh`` how often a waiting acquire looks again.
    Durations are seconds or ``timedelta``. ``heartbeat_rate_limit`` caps
    the heartbeats this client starts per second (default: no cap), to
    bound the write rate of a client holding many locks.

    A crashed holder's lock is taken over once its lease has passed, counted
    from its last write. Where the store keeps time (PostgreSQL, and
    ``MemoryStore(clock=True)``) the store's clock says so, and a fresh
    process takes the lock the first time it looks (``use_store_clock=False``
    turns this off). DynamoDB and bucket stores stamp writes with a
    wall-clock time, which this client believes only when told
    ``max_clock_difference``: the most any two hosts' clocks (and the
    service's) differ. Without either, a waiter watches the record unchanged
    for ``lease × (1 + max_clock_drift)`` first, which needs no clock
    assumption. A host whose clock is off by more than the bound can take a
    live holder's lock early; fences still refuse the old holder's writes.
    ``lock_delay`` leaves a silent holder's lock alone that much longer (as
    Chubby's lock-delay), for resources that cannot check fences: set it
    alike on every client of a lock.

    One client per process is enough: share it between threads and tasks.
    Its acquires of one key queue inside it, first come first served. Close
    it (``close()``, or use it as a context manager) to release what it still
    holds; at interpreter exit open clients are closed for you.

    >>> client = LockClient(MemoryStore(), owner="worker-1")
    >>> with client.lock("report", wait=30) as lock:
    ...     lock.fence
    1
    >>> client.close()["released"]  # the lock was released when the block ended
    []
    """

    def __init__(
        self,
        store: Store,
        *,
        owner: str | None = None,
        lease: Seconds | None = None,
        heartbeat: Seconds | None = None,
        refresh: Seconds | None = None,
        max_clock_drift: float | None = None,
        safety_margin: Seconds | None = None,
        shutdown_timeout: Seconds | None = None,
        heartbeat_rate_limit: int | None = None,
        max_clock_difference: Seconds | None = None,
        use_store_clock: bool = True,
        lock_delay: Seconds | None = None,
    ) -> None:
        if not isinstance(use_store_clock, bool):
            raise TypeError(
                f"use_store_clock must be True or False, not {type(use_store_clock).__name__}"
            )
        if heartbeat_rate_limit is not None and (
            isinstance(heartbeat_rate_limit, bool) or not isinstance(heartbeat_rate_limit, int)
        ):
            raise TypeError(
                f"heartbeat_rate_limit must be an int (heartbeats per second) or None, "
                f"not {type(heartbeat_rate_limit).__name__}"
            )
        if heartbeat_rate_limit is not None and not 1 <= heartbeat_rate_limit < 2**32:
            raise ConfigError(
                f"heartbeat_rate_limit must be a whole number of heartbeats per second, at least 1, "
                f"not {heartbeat_rate_limit!r} (None for no limit)"
            )
        _events.start()
        self._native = _native.Client(
            store,
            owner,
            _seconds("lease", lease),
            _seconds("heartbeat", heartbeat),
            _seconds("refresh", refresh),
            max_clock_drift,
            _seconds("safety_margin", safety_margin),
            _seconds("shutdown_timeout", shutdown_timeout),
            heartbeat_rate_limit,
            _seconds("max_clock_difference", max_clock_difference),
            use_store_clock,
            _seconds("lock_delay", lock_delay),
        )
        _events.register(self)

    @property
    def owner(self) -> str:
        """The owner name written into this client's locks."""
        return self._native.owner

    @property
    def lease(self) -> float:
        """The default lease, in seconds."""
        return self._native.lease

    @property
    def heartbeat(self) -> float:
        """The heartbeat period, in seconds."""
        return self._native.heartbeat

    def _acquire(
        self,
        key: str,
        sort_key: str | None,
        try_once: bool,
        is_async: bool,
        wait: Seconds | None,
        lease: Seconds | None,
        data: bytes | bytearray | memoryview | None,
        min_hold: Seconds | None,
        max_hold: Seconds | None,
        refresh: Seconds | None,
        busy_unless_dead: bool,
        only_if_exists: bool,
        reentrant: bool,
        delete_on_release: bool,
        on_unsafe: Callable[[LostReason], object] | None,
    ) -> Any:
        return self._native.acquire(
            key,
            sort_key,
            try_once,
            is_async,
            _seconds("wait", wait),
            _seconds("lease", lease),
            _bytes(data),
            _seconds("min_hold", min_hold),
            _seconds("max_hold", max_hold),
            _seconds("refresh", refresh),
            busy_unless_dead,
            only_if_exists,
            reentrant,
            delete_on_release,
            on_unsafe,
        )

    def acquire(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
        busy_unless_dead: bool = False,
        only_if_exists: bool = False,
        reentrant: bool = False,
        delete_on_release: bool = False,
        on_unsafe: Callable[[LostReason], object] | None = None,
        on_lost: Callable[[LostReason], object] | None = None,
    ) -> Lock:
        """Acquire ``key``, waiting while someone else holds it; return the held ``Lock``.

        ``wait`` is the most to wait: by default ``lease × (1 + drift) +
        refresh`` (long enough to take over from a holder that crashed), ``0``
        for one attempt, ``math.inf`` for no limit. Raises ``AcquireTimeout``
        when it runs out. ``lease`` overrides the client's for this lock;
        ``data`` is stored with the lock; ``min_hold`` keeps the lock held at
        least that long after acquiring, even if released sooner (a job that
        must not run twice in a period); ``max_hold`` stops heartbeats after
        that long; ``busy_unless_dead`` reports a live holder as busy at once
        and waits only for a dead one; ``on_unsafe(reason)`` is called on the
        package's callback thread the moment the lease is no longer safe (in
        danger or lost; not when this process releases it), the moment
        ``lock.until_unsafe()`` resolves (``on_lost`` is its deprecated
        name). The
        blocking wait releases the GIL and stops at Ctrl-C (leaving nothing
        held).
        """
        lock: Lock = self._acquire(
            key, sort_key, False, False, wait, lease, data, min_hold, max_hold, refresh,
            busy_unless_dead, only_if_exists, reentrant, delete_on_release, _on_unsafe(on_unsafe, on_lost),
        )
        return lock

    async def acquire_async(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
        busy_unless_dead: bool = False,
        only_if_exists: bool = False,
        reentrant: bool = False,
        delete_on_release: bool = False,
        on_unsafe: Callable[[LostReason], object] | None = None,
        on_lost: Callable[[LostReason], object] | None = None,
    ) -> Lock:
        """``acquire``, awaited. Cancelling it (``asyncio.wait_for``'s timeout) leaves nothing held."""
        lock: Lock = await self._acquire(
            key, sort_key, False, True, wait, lease, data, min_hold, max_hold, refresh,
            busy_unless_dead, only_if_exists, reentrant, delete_on_release, _on_unsafe(on_unsafe, on_lost),
        )
        return lock

    def try_acquire(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        busy_unless_dead: bool = False,
        only_if_exists: bool = False,
        reentrant: bool = False,
        delete_on_release: bool = False,
        on_unsafe: Callable[[LostReason], object] | None = None,
        on_lost: Callable[[LostReason], object] | None = None,
    ) -> Lock | None:
        """One attempt at ``key``: the held ``Lock``, or ``None`` when someone else holds it."""
        lock: Lock | None = self._acquire(
            key, sort_key, True, False, None, lease, data, min_hold, max_hold, None,
            busy_unless_dead, only_if_exists, reentrant, delete_on_release, _on_unsafe(on_unsafe, on_lost),
        )
        return lock

    async def try_acquire_async(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        busy_unless_dead: bool = False,
        only_if_exists: bool = False,
        reentrant: bool = False,
        delete_on_release: bool = False,
        on_unsafe: Callable[[LostReason], object] | None = None,
        on_lost: Callable[[LostReason], object] | None = None,
    ) -> Lock | None:
        """``try_acquire``, awaited."""
        lock: Lock | None = await self._acquire(
            key, sort_key, True, True, None, lease, data, min_hold, max_hold, None,
            busy_unless_dead, only_if_exists, reentrant, delete_on_release, _on_unsafe(on_unsafe, on_lost),
        )
        return lock

    def lock(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
        busy_unless_dead: bool = False,
        only_if_exists: bool = False,
        reentrant: bool = False,
        delete_on_release: bool = False,
        on_unsafe: Callable[[LostReason], object] | None = None,
        on_lost: Callable[[LostReason], object] | None = None,
    ) -> LockContext:
        """The lock as a context manager: ``with client.lock(key) as lock:`` or ``async with``.

        Acquires on entry (as ``acquire``, same arguments), releases on exit.
        An exception raised in the block propagates; a failed release is then
        logged, and otherwise raised (``LockLost`` if the lease was lost while
        the block ran).
        """
        return LockContext(
            self,
            dict(
                key=key, sort_key=sort_key, wait=wait, lease=lease, data=data, min_hold=min_hold,
                max_hold=max_hold, refresh=refresh, busy_unless_dead=busy_unless_dead,
                only_if_exists=only_if_exists, reentrant=reentrant,
                delete_on_release=delete_on_release, on_unsafe=_on_unsafe(on_unsafe, on_lost),
            ),
        )

    def get_lock(self, key: str, *, sort_key: str | None = None) -> LockInfo | None:
        """The lock's record as stored (one consistent read), or ``None``."""
        info: LockInfo | None = self._native.get_lock(key, sort_key, False)
        return info

    async def get_lock_async(self, key: str, *, sort_key: str | None = None) -> LockInfo | None:
        """``get_lock``, awaited."""
        info: LockInfo | None = await self._native.get_lock(key, sort_key, True)
        return info

    def list_locks(self, *, partition: str | None = None) -> list[LockInfo]:
        """Every lock in the store, or under one key (``partition``) of a table with sort keys."""
        locks: list[LockInfo] = self._native.list_locks(partition, False)
        return locks

    async def list_locks_async(self, *, partition: str | None = None) -> list[LockInfo]:
        """``list_locks``, awaited."""
        locks: list[LockInfo] = await self._native.list_locks(partition, True)
        return locks

    def force_release(self, key: str, *, sort_key: str | None = None) -> LockInfo | None:
        """Release ``key`` whoever holds it (an operator's tool for a stuck lock).

        Returns the lock as it was, or ``None`` if it was vacant. The holder,
        if alive, learns of it on its next heartbeat; until then fences guard
        the resource.
        """
        info: LockInfo | None = self._native.force_release(key, sort_key, False)
        return info

    async def force_release_async(self, key: str, *, sort_key: str | None = None) -> LockInfo | None:
        """``force_release``, awaited."""
        info: LockInfo | None = await self._native.force_release(key, sort_key, True)
        return info

    def release_version(self, key: str, version: str, *, sort_key: str | None = None) -> LockInfo:
        """Release ``key`` if its record still carries ``version``; return the lock as it was.

        For a lock detached with ``Lock.detach()`` (in this process or one
        that handed on the version). Raises ``NotOwned`` when the record has
        another version (its holder heartbeated since, or someone took it).
        """
        info: LockInfo = self._native.release_version(key, sort_key, version, False)
        return info

    async def release_version_async(
        self, key: str, version: str, *, sort_key: str | None = None
    ) -> LockInfo:
        """``release_version``, awaited."""
        info: LockInfo = await self._native.release_version(key, sort_key, version, True)
        return info

    def elect(
        self,
        key: str,
        *,
        sort_key: str | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        retry_min: Seconds | None = None,
        retry_max: Seconds | None = None,
    ) -> Election:
        """Campaign for leadership of ``key``; return the ``Election``.

        The election campaigns in the background until ``resign()`` (or the
        end of its ``with`` block): it acquires the lock (waiting as long as
        it takes), leads while the lease is safe, steps down the moment it is
        not, and campaigns again, after an error too (pausing ``retry_min``,
        1 s, doubling to ``retry_max``, 30 s). ``role`` says where it stands;
        ``leadership()`` waits until it leads; ``lead(work)`` runs an
        awaitable as leader, cancelled when the leadership can no longer be
        trusted. ``data`` is stored with the lock while it leads (followers
        see it in their ``role``). Candidates of one client queue inside it:
        a resigning leader hands over to the next in one write.

        >>> client = LockClient(MemoryStore(), owner="node-a")
        >>> with client.elect("scheduler") as election:
        ...     election.leadership(timeout=5).fence
        1
        >>> client.close()["released"]
        []
        """
        election: Election = self._native.elect(
            key,
            sort_key,
            _seconds("lease", lease),
            _bytes(data),
            _seconds("retry_min", retry_min),
            _seconds("retry_max", retry_max),
        )
        return election

    def semaphore(self, name: str, permits: int) -> Semaphore:
        """A counting semaphore named ``name`` with ``permits`` permits.

        At most ``permits`` holders (on any clients) hold a permit with a safe
        lease at once. ``acquire()`` (and ``acquire_async``, ``try_acquire``)
        returns a permit as a ``Lock`` on one of the semaphore's slots
        (``lock.slot``): leased, heartbeated, fenced, released by ``release()``
        or a ``with`` block. Every client must use the same count: another one
        raises ``LockError`` on its first acquire, before writing anything.

        >>> client = LockClient(MemoryStore(), owner="worker-1")
        >>> exports = client.semaphore("exports", 4)
        >>> with exports.acquire(wait=30) as permit:
        ...     permit.slot is not None
        True
        >>> client.close()["released"]
        []
        """
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise TypeError(f"permits must be an int, not {type(permits).__name__}")
        if not 1 <= permits < 2**32:
            raise InvalidInput(f"semaphore {name}: {permits} permits; a semaphore has at least 1")
        semaphore: Semaphore = self._native.semaphore(name, permits)
        return semaphore

    def rw_lock(self, name: str, max_readers: int) -> RwLock:
        """A reader-writer lock named ``name`` with room for ``max_readers`` readers at once.

        Any number of readers up to that, or one writer (see ``RwLock``).
        Every client must open it with the same count; another one raises
        ``InvalidInput`` on its first read or write, before writing anything.
        The most readers a store allows: 1,000 with sort keys, 100 without.
        """
        if isinstance(max_readers, bool) or not isinstance(max_readers, int):
            raise TypeError(f"max_readers must be an int, not {type(max_readers).__name__}")
        if not 0 <= max_readers < 2**32:
            raise InvalidInput(f"reader-writer lock {name}: {max_readers} readers; it has at least 1")
        return RwLock(self._native.rw_lock(name, max_readers))

    def acquire_all(
        self,
        keys: Keys,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> LockGroup:
        """Acquire every key of ``keys`` (each a key or a ``(key, sort_key)`` pair), all or nothing.

        The keys are taken in one fixed order (duplicates once), whatever
        order they come in, so clients asking for overlapping sets never
        deadlock; ``wait`` is the budget for the whole set (by default that of
        one acquire). If any key cannot be had in time, or anything fails,
        every key taken so far is released before the error (``AcquireTimeout``
        naming the key) is raised. Each member keeps its own lease, heartbeats
        and fence; the other arguments apply to each.
        """
        locks, at_once = self._native.acquire_all(
            _pairs(keys), False, wait=wait, lease=lease, data=data, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return LockGroup(locks, at_once)

    async def acquire_all_async(
        self,
        keys: Keys,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> LockGroup:
        """``acquire_all``, awaited. Cancelling it leaves nothing held."""
        locks, at_once = await self._native.acquire_all(
            _pairs(keys), True, wait=wait, lease=lease, data=data, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return LockGroup(locks, at_once)

    def lock_all(
        self,
        keys: Keys,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> LockGroupContext:
        """Several locks as one context manager: ``with client.lock_all(["a", "b"]) as group:``.

        Acquires on entry (as ``acquire_all``, same arguments), releases every
        member on exit (``async with`` too).

        >>> client = LockClient(MemoryStore(), owner="mover")
        >>> with client.lock_all(["account-7", "account-3"], wait=10) as group:
        ...     group.fences
        {'account-3': 1, 'account-7': 1}
        >>> client.close()["released"]
        []
        """
        return LockGroupContext(
            self,
            dict(
                keys=list(keys), wait=wait, lease=lease, data=data, min_hold=min_hold,
                max_hold=max_hold, refresh=refresh,
            ),
        )

    def held_keys(self) -> list[tuple[str, str | None]]:
        """The ``(key, sort_key)`` of each lock this client holds."""
        return self._native.held_keys()

    def close(self) -> dict[str, Any]:
        """Stop heartbeats and release every lock still held, within the shutdown timeout.

        Returns what happened, each lock as a ``(key, sort_key)`` pair (as
        ``held_keys()``): ``{"released": [...], "failed": [((key, sort_key),
        message), ...], "timed_out": [...]}``. Later calls on the client raise
        ``ClientClosed``; closing again does nothing. Neither Ctrl-C nor a
        cancelled ``close_async`` stops the releases once started.
        """
        report: dict[str, Any] = self._native.close(False)
        return report

    async def close_async(self) -> dict[str, Any]:
        """``close``, awaited."""
        report: dict[str, Any] = await self._native.close(True)
        return report

    def _close_at_exit(self) -> None:
        _log_report("at exit", self.close())

    def __enter__(self) -> LockClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _log_report("leaving the client's with block", self.close())

    async def __aenter__(self) -> LockClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _log_report("leaving the client's async with block", await self.close_async())

    def __repr__(self) -> str:
        return f"LockClient(owner={self.owner!r}, lease={self.lease})"


def _log_report(when: str, report: dict[str, Any]) -> None:
    """Log the locks a close could not release (the caller keeps no report)."""
    for (key, sort_key), message in report["failed"]:
        logger.warning("%s, lock %s could not be released: %s", when, _name(key, sort_key), message)
    for key, sort_key in report["timed_out"]:
        logger.warning("%s, lock %s was not released within the shutdown timeout", when, _name(key, sort_key))


def _name(key: str, sort_key: str | None) -> str:
    return key if sort_key is None else f"{key} (sort key {sort_key})"


class LockContext:
    """What ``LockClient.lock`` returns: acquires on entry, releases on exit (``with`` or ``async with``).

    One context may be entered again while it is held (nested, with
    ``reentrant=True``) and by several threads or tasks at once: each exit
    releases the lock its own entry acquired, kept per thread and per task.
    """

    def __init__(self, client: LockClient, arguments: dict[str, Any]) -> None:
        self._client = client
        self._arguments = arguments
        # The locks this context's entries hold, innermost last, in the
        # current thread's or task's own context.
        self._held: contextvars.ContextVar[tuple[Lock, ...]] = contextvars.ContextVar(
            f"lease_lock.LockContext.{id(self)}", default=()
        )

    def _entered(self, lock: Lock) -> Lock:
        self._held.set((*self._held.get(), lock))
        return lock

    def _exiting(self) -> Lock | None:
        held = self._held.get()
        if not held:
            return None
        self._held.set(held[:-1])
        return held[-1]

    def __enter__(self) -> Lock:
        return self._entered(self._client.acquire(**self._arguments))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lock = self._exiting()
        if lock is None:
            return
        if exc is None:
            lock.release()
            return
        try:
            lock.release()
        except Exception:
            logger.exception("releasing lock %s after an exception in its block failed", lock.key)

    async def __aenter__(self) -> Lock:
        return self._entered(await self._client.acquire_async(**self._arguments))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lock = self._exiting()
        if lock is None:
            return
        if exc is None:
            await lock.release_async()
            return
        try:
            await lock.release_async()
        except Exception:
            logger.exception("releasing lock %s after an exception in its block failed", lock.key)