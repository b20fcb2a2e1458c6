"""The exceptions of lease_lock: one base class, one subclass per kind of error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ._types import LostReason

__all__ = [
    "LockError",
    "AcquireTimeout",
    "NotOwned",
    "LockLost",
    "AlreadyHeld",
    "LockNotFound",
    "ConfigError",
    "InvalidInput",
    "StoreError",
    "StoreSetupError",
    "ClientClosed",
    "ForkedError",
    "FenceRefused",
    "StaleFence",
    "OtherLockFence",
]


class LockError(Exception):
    """Base class of every error lease_lock raises.

    ``retryable`` says whether the same call may succeed if made again later
    (the lock was busy, or the store failed in a way that can pass); it is
    False for what another attempt cannot change (bad configuration or input,
    a missing table, refused credentials, a lost lock, a closed client).
    """

    retryable: bool
    message: str

    #: The attributes of this class's instances besides ``message`` and
    #: ``retryable``: every instance has each of them (``None`` when not
    #: given), however it was made.
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str = "", *, retryable: bool = False, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        for name in self._fields:
            setattr(self, name, None)
        for name, value in fields.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its attributes (Exception's own pickling keeps only
        # the message): across processes, and from multiprocessing workers.
        return (type(self), (self.message,), dict(self.__dict__))


class AcquireTimeout(LockError, TimeoutError):
    """The wait ran out while another owner held the lock.

    ``holder`` is the owner last seen holding it (``None`` if the store kept
    failing); ``waited`` the seconds waited. Pass a longer ``wait`` to wait
    longer.
    """

    key: str
    sort_key: str | None
    holder: str | None
    waited: float

    _fields = ("key", "sort_key", "holder", "waited")


class NotOwned(LockError):
    """The lock is not held by this client at the version named: nothing was written.

    ``owner`` is the current owner, if any.
    """

    key: str
    sort_key: str | None
    owner: str | None

    _fields = ("key", "sort_key", "owner")


class LockLost(LockError):
    """The lease can no longer be trusted (stolen, expired, in danger, past its max hold).

    ``reason`` says which. Work done under the lock since then may have
    overlapped another holder's: that is what fences are for.
    """

    key: str
    sort_key: str | None
    reason: LostReason

    _fields = ("key", "sort_key", "reason")


class AlreadyHeld(LockError):
    """A one-attempt acquire found the lock held or being acquired by this same client.

    Give the acquire a ``wait`` to queue for it instead.
    """

    key: str
    sort_key: str | None

    _fields = ("key", "sort_key")


class LockNotFound(LockError):
    """``only_if_exists=True`` was asked and the lock has no record."""

    key: str
    sort_key: str | None

    _fields = ("key", "sort_key")


class ConfigError(LockError, ValueError):
    """The client's settings or an acquire's options are invalid; the message says what to change."""


class InvalidInput(LockError, ValueError):
    """A key, data or argument is invalid for this store; nothing was written."""


class StoreError(LockError):
    """The store failed in a way retries did not fix, or that is not retryable.

    ``kind`` is one of ``"throttled"``, ``"unavailable"``, ``"ambiguous"``,
    ``"not_found"`` (no such table), ``"invalid"``, ``"unauthorized"``,
    ``"other"``.
    """

    kind: str

    _fields = ("kind",)


class StoreSetupError(LockError):
    """A store could not be built, or its table or schema created or validated."""


class ClientClosed(LockError):
    """The client was closed; make a new one."""


class ForkedError(LockError):
    """A client, store or lock made before ``os.fork()`` was used in the child.

    The child has none of the parent's threads: create the store and the
    client again in the child.
    """


class FenceRefused(LockError):
    """A resource refused a write's fence: nothing was written.

    Stop the work: the lock this fence came from no longer guards the
    resource for this writer. ``resource`` names the resource (the row,
    item or object).
    """

    resource: str

    _fields: ClassVar[tuple[str, ...]] = ("resource",)


class StaleFence(FenceRefused):
    """A newer holder of the lock wrote the resource: this holder's lease ran out.

    ``presented`` is the fence this write carried, ``highest`` the highest
    fence that wrote the resource.
    """

    presented: int
    highest: int

    _fields = ("resource", "presented", "highest")


class OtherLockFence(FenceRefused):
    """The resource is fenced by another lock, whose fences do not compare with this one's.

    ``fenced_by`` is the name of the lock that guards it (its key as fences
    name it: ``partition`` or ``partition/sort``, ``%`` and ``/`` inside a
    part escaped; see :class:`lease_lock.fencing.FenceToken`),
    ``presented_by`` the name of the lock whose fence was presented.
    """

    fenced_by: str
    presented_by: str

    _fields = ("resource", "fenced_by", "presented_by")
