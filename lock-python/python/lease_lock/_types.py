"""The values lease_lock returns: lease states, loss reasons, lock records."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Union

__all__ = ["Seconds", "LeaseState", "LostReason", "LockInfo", "Takeover", "Role"]

#: A duration: seconds (``int`` or ``float``) or a ``datetime.timedelta``.
Seconds = Union[float, int, timedelta]


class LeaseState(str, enum.Enum):
    """Whether a held lock's lease can be trusted right now."""

    #: Safe to act under the lock.
    SAFE = "safe"
    #: Past the safe time, before the lease ends: stop starting work.
    IN_DANGER = "in_danger"
    #: The lease can no longer be trusted (see ``Lock.lost_reason``).
    LOST = "lost"


LostKind = Literal["stolen", "expired", "in_danger", "released", "max_hold", "other"]


@dataclass(frozen=True)
class LostReason:
    """Why a lease can no longer be trusted.

    ``kind`` is ``"stolen"`` (another writer replaced the record; ``owner``
    names it), ``"expired"`` (no heartbeat confirmed within the lease),
    ``"in_danger"``, ``"released"`` or ``"max_hold"`` (held for its
    ``max_hold``, ``limit`` seconds).
    """

    kind: LostKind
    owner: str | None
    limit: float | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Takeover:
    """What the holder an acquire took over left behind (after a crash)."""

    #: Owner name of that holder.
    owner: str
    #: Its fence (this acquisition's is higher).
    fence: int
    #: The data it left with the lock (a checkpoint, for example).
    data: bytes | None


@dataclass(frozen=True)
class LockInfo:
    """A lock as stored, for inspection."""

    key: str
    sort_key: str | None
    #: Owner name of the last writer.
    owner: str
    #: Fence of the latest acquisition.
    fence: int
    #: The lease the holder promised, in seconds.
    lease: float
    #: Whether the lock is released (vacant).
    released: bool
    data: bytes | None
    #: Whether this client holds it right now.
    held_by_this_client: bool
    #: The record version.
    version: str


RoleKind = Literal["leader", "follower", "campaigning"]


@dataclass(frozen=True)
class Role:
    """Where a candidate in a leader election stands.

    ``kind`` is ``"leader"`` (this candidate leads; ``fence`` is its
    leadership's), ``"follower"`` (``leader`` leads with ``fence``, as the
    candidate's last poll showed, with the ``data`` it stored) or
    ``"campaigning"`` (no leader seen: the lock is free, the candidate waits
    behind another candidate of its own client, or it pauses after an error).
    """

    kind: RoleKind
    fence: int | None
    leader: str | None
    data: bytes | None
