"""Lease-based distributed locks for Python, on DynamoDB, PostgreSQL, an S3, GCS or Azure bucket, etcd, Redis or Valkey, or in memory.

Built on a Rust core: heartbeats run on the core's own threads, so a lock
stays held while Python code keeps the GIL busy; every lock has a fencing
token; blocking calls release the GIL and stop at Ctrl-C; every call has an
``asyncio`` twin (``acquire_async``, ``release_async``, ``async with``).

>>> import lease_lock
>>> client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="worker-1")
>>> with client.lock("nightly-report", wait=30) as lock:
...     print("fence", lock.fence)
fence 1
>>> client.close()["released"]
[]

See docs/python.md in the repository for the whole guide.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._client import LockClient, LockContext, Store
from ._group import LockGroup, LockGroupContext
from ._rw import RwLock
from ._errors import (
    AcquireTimeout,
    AlreadyHeld,
    ClientClosed,
    ConfigError,
    FenceRefused,
    ForkedError,
    InvalidInput,
    LockError,
    LockLost,
    LockNotFound,
    NotOwned,
    OtherLockFence,
    StaleFence,
    StoreError,
    StoreSetupError,
)
from ._metrics import HistogramValue, Metric, metrics
from ._native import (
    BucketStore,
    DynamoDBStore,
    Election,
    EtcdStore,
    Leadership,
    Lock,
    MemoryStore,
    PostgresStore,
    RedisStore,
    Semaphore,
)
from . import fencing
from ._types import LeaseState, LockInfo, LostReason, Role, Seconds, Takeover

try:
    #: The installed package's version (PEP 440), e.g. ``"0.1.0"``.
    __version__: str = version("lease-lock")
except PackageNotFoundError:  # pragma: no cover - run from a source tree
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "LockClient",
    "LockContext",
    "Lock",
    "Election",
    "Semaphore",
    "RwLock",
    "LockGroup",
    "LockGroupContext",
    "Leadership",
    "Role",
    "Store",
    "MemoryStore",
    "DynamoDBStore",
    "PostgresStore",
    "BucketStore",
    "EtcdStore",
    "RedisStore",
    "LeaseState",
    "LostReason",
    "LockInfo",
    "Takeover",
    "Seconds",
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
    "fencing",
    "metrics",
    "Metric",
    "HistogramValue",
]
