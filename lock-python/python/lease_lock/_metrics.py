"""The lock library's metrics, as this process's clients recorded them."""

from __future__ import annotations

from typing import Literal, TypedDict, Union

from . import _native

__all__ = ["Metric", "HistogramValue", "metrics"]


class HistogramValue(TypedDict):
    """A histogram's samples, summed up (``min`` and ``max`` are 0 with none)."""

    count: int
    sum: float
    min: float
    max: float


class Metric(TypedDict):
    """One series: a metric's name, its labels and its value now."""

    #: The metric's name, for example ``"lock_acquires_total"``.
    name: str
    #: Its labels, for example ``{"outcome": "acquired"}``.
    labels: dict[str, str]
    #: ``"counter"``, ``"gauge"`` or ``"histogram"``.
    type: Literal["counter", "gauge", "histogram"]
    #: A counter's total, a gauge's value, or a histogram's summary.
    value: Union[int, float, HistogramValue]


def metrics() -> list[Metric]:
    """Every metric the lock clients of this process have recorded so far.

    Counted since the package was imported, across all clients (store calls
    and their latency by operation and outcome, acquires, heartbeats, locks
    held and lost, shutdowns; the names are listed in docs/operations.md),
    sorted by name and labels. Counters only grow: to measure a stretch of
    work, take the difference of two calls.

    >>> import lease_lock
    >>> client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="doc")
    >>> with client.lock("job"):
    ...     pass
    >>> acquired = [m for m in lease_lock.metrics()
    ...             if m["name"] == "lock_acquires_total"
    ...             and m["labels"] == {"outcome": "acquired"}]
    >>> acquired[0]["value"] >= 1
    True
    >>> _ = client.close()
    """
    figures: list[Metric] = _native.metrics()
    return figures
