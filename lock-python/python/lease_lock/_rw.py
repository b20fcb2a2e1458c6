"""RwLock: a reader-writer lock (many readers or one writer), from threads or asyncio."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._native import Lock

if TYPE_CHECKING:
    from . import _native
    from ._types import Seconds

__all__ = ["RwLock"]


class RwLock:
    """A reader-writer lock: any number of readers (up to ``max_readers``) or one writer.

    Made by ``LockClient.rw_lock(name, max_readers)``; every client must open
    it with the same count. Each method returns a held ``Lock`` (a context
    manager: ``with lock.read() as read:``), with a lease, heartbeats,
    ``is_safe``, ``until_unsafe()`` and ``run_while_safe``.

    * A read's ``fence`` is the writer fence it was admitted with (the last
      writer's) and its ``data`` what that writer left; send the fence with
      every read of the protected resource. The fencing helpers
      (:mod:`lease_lock.fencing`) name a read and a write alike by the lock's
      write lock (``config/writer``), as the Rust API and ``lockctl run
      --shared``/``--exclusive`` do, so all of them fence one resource.
    * A writer waits for the readers inside to leave; once it waits, new
      readers wait behind it, so writers are not starved.
    * ``upgradeable_read()`` reads with the right to become the writer later
      (``read.upgrade()``) without another writer in between; one at a time.

    >>> import lease_lock
    >>> client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="app-1")
    >>> config = client.rw_lock("config", 16)
    >>> with config.write(wait=10) as write:
    ...     write.release(data=b"version 7")
    >>> with config.read(wait=10) as read:
    ...     (read.fence, read.data)
    (1, b'version 7')
    >>> client.close()["released"]
    []
    """

    __slots__ = ("_native",)

    def __init__(self, native: _native.RwLock) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._native.name

    @property
    def max_readers(self) -> int:
        """How many readers it has room for."""
        return self._native.max_readers

    def read(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """Read: wait while a writer holds the lock or waits for it (and while
        every reader slot is taken), up to ``wait`` (by default long enough to
        clear a crashed writer; ``0`` for one attempt). Raises
        ``AcquireTimeout`` when it runs out."""
        lock: Lock = self._native.acquire(
            "read", False, False, wait=wait, lease=lease, min_hold=min_hold, max_hold=max_hold,
            refresh=refresh,
        )
        return lock

    async def read_async(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """``read``, awaited. Cancelling it leaves nothing held."""
        lock: Lock = await self._native.acquire(
            "read", False, True, wait=wait, lease=lease, min_hold=min_hold, max_hold=max_hold,
            refresh=refresh,
        )
        return lock

    def try_read(
        self,
        *,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """One attempt to read: ``None`` when a writer holds the lock or waits for it."""
        lock: Lock | None = self._native.acquire(
            "read", True, False, lease=lease, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    async def try_read_async(
        self,
        *,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """``try_read``, awaited."""
        lock: Lock | None = await self._native.acquire(
            "read", True, True, lease=lease, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    def write(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """Write: take the write lock (new readers now wait), then wait for the
        readers inside to leave, all within ``wait``. ``data`` is stored in the
        write lock's record, where readers find it (``read.data``); so is
        ``release(data=...)``'s. On a timeout nothing stays held."""
        lock: Lock = self._native.acquire(
            "write", False, False, wait=wait, lease=lease, data=data, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return lock

    async def write_async(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """``write``, awaited. Cancelling it leaves nothing held."""
        lock: Lock = await self._native.acquire(
            "write", False, True, wait=wait, lease=lease, data=data, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return lock

    def try_write(
        self,
        *,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """One attempt to write: ``None`` while anyone else reads or writes."""
        lock: Lock | None = self._native.acquire(
            "write", True, False, lease=lease, data=data, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    async def try_write_async(
        self,
        *,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """``try_write``, awaited."""
        lock: Lock | None = await self._native.acquire(
            "write", True, True, lease=lease, data=data, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    def upgradeable_read(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """Read with the right to become the writer: ``lock.upgrade()`` returns
        the write. One upgradeable reader at a time; plain readers share the
        lock with it, writers wait."""
        lock: Lock = self._native.acquire(
            "upgradeable", False, False, wait=wait, lease=lease, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return lock

    async def upgradeable_read_async(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock:
        """``upgradeable_read``, awaited."""
        lock: Lock = await self._native.acquire(
            "upgradeable", False, True, wait=wait, lease=lease, min_hold=min_hold,
            max_hold=max_hold, refresh=refresh,
        )
        return lock

    def try_upgradeable_read(
        self,
        *,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """One attempt at ``upgradeable_read``: ``None`` while a writer or another
        upgradeable reader holds the lock."""
        lock: Lock | None = self._native.acquire(
            "upgradeable", True, False, lease=lease, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    async def try_upgradeable_read_async(
        self,
        *,
        lease: Seconds | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None:
        """``try_upgradeable_read``, awaited."""
        lock: Lock | None = await self._native.acquire(
            "upgradeable", True, True, lease=lease, min_hold=min_hold, max_hold=max_hold
        )
        return lock

    def __repr__(self) -> str:
        return f"<RwLock {self.name} max_readers={self.max_readers}>"
