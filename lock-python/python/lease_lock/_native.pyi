"""The Rust core of lease_lock (use the names lease_lock exports)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Literal, TypeVar, overload

from typing_extensions import Self, deprecated, final

from ._metrics import Metric
from .fencing import FenceToken
from ._types import LeaseState, LockInfo, LostReason, Role, Seconds, Takeover

T = TypeVar("T")

@final
class MemoryStore:
    """Locks in this process's memory (tests, and locks between threads and tasks)."""

    def __new__(cls, clock: bool = False) -> Self: ...
    def set_unavailable(self, unavailable: bool) -> None: ...
    def __len__(self) -> int: ...

@final
class DynamoDBStore:
    """Locks in a DynamoDB table."""

    def __new__(
        cls,
        table: str,
        *,
        layout: str = "native",
        partition_key: str | None = None,
        sort_key: str | None = None,
        no_sort_key: bool = False,
        expiry_attribute: str | None = None,
        expiry: Seconds | None = None,
        data_as_attributes: bool = False,
        released_attribute: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        session: Any | None = None,
    ) -> Self: ...
    @property
    def table(self) -> str: ...
    @overload
    def create_table(
        self, *, wait: Seconds | None = None, ttl: bool = True, exist_ok: bool = False, is_async: Literal[False] = False
    ) -> None: ...
    @overload
    def create_table(
        self, *, wait: Seconds | None = None, ttl: bool = True, exist_ok: bool = False, is_async: Literal[True]
    ) -> Awaitable[None]: ...
    @overload
    def validate_table(self, *, is_async: Literal[False] = False) -> list[str]: ...
    @overload
    def validate_table(self, *, is_async: Literal[True]) -> Awaitable[list[str]]: ...
    @overload
    def delete_table(self, *, wait: Seconds | None = None, is_async: Literal[False] = False) -> None: ...
    @overload
    def delete_table(self, *, wait: Seconds | None = None, is_async: Literal[True]) -> Awaitable[None]: ...

@final
class PostgresStore:
    """Locks in a PostgreSQL table."""

    def __new__(cls, url: str, *, table: str = "locks", max_connections: int | None = None) -> Self: ...
    @property
    def table(self) -> str: ...
    @overload
    def create_schema(self, *, is_async: Literal[False] = False) -> None: ...
    @overload
    def create_schema(self, *, is_async: Literal[True]) -> Awaitable[None]: ...
    @overload
    def validate_schema(self, *, is_async: Literal[False] = False) -> None: ...
    @overload
    def validate_schema(self, *, is_async: Literal[True]) -> Awaitable[None]: ...
    @property
    def fence_function(self) -> str: ...
    @overload
    def create_fence_guard(self, *, is_async: Literal[False] = False) -> str: ...
    @overload
    def create_fence_guard(self, *, is_async: Literal[True]) -> Awaitable[str]: ...

@final
class BucketStore:
    """Locks in an S3, Google Cloud Storage or Azure Blob bucket, under a prefix."""

    def __new__(
        cls,
        url: str,
        *,
        options: Mapping[str, str] | None = None,
        request_timeout: Seconds | None = None,
    ) -> Self: ...
    @property
    def url(self) -> str: ...
    @overload
    def validate_bucket(self, *, is_async: Literal[False] = False) -> None: ...
    @overload
    def validate_bucket(self, *, is_async: Literal[True]) -> Awaitable[None]: ...
    @overload
    def fenced_put(
        self, path: str, data: bytes, lock: Lock | Leadership | FenceToken, *, is_async: Literal[False] = False
    ) -> None: ...
    @overload
    def fenced_put(
        self, path: str, data: bytes, lock: Lock | Leadership | FenceToken, *, is_async: Literal[True]
    ) -> Awaitable[None]: ...
    @overload
    def fenced_get(
        self, path: str, *, is_async: Literal[False] = False
    ) -> tuple[bytes, int | None] | None: ...
    @overload
    def fenced_get(
        self, path: str, *, is_async: Literal[True]
    ) -> Awaitable[tuple[bytes, int | None] | None]: ...

@final
class EtcdStore:
    """Locks in etcd v3, one key per lock under the URL's prefix."""

    def __new__(
        cls,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        request_timeout: Seconds | None = None,
    ) -> Self: ...
    @property
    def url(self) -> str: ...
    @property
    def prefix(self) -> str: ...

@final
class RedisStore:
    """Locks in Redis or Valkey, one hash per lock under a prefix."""

    def __new__(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        request_timeout: Seconds | None = None,
        wait_for_replicas: tuple[int, Seconds] | None = None,
    ) -> Self: ...
    @property
    def url(self) -> str: ...
    @property
    def prefix(self) -> str: ...

@final
class Lock:
    """A held lock."""

    @property
    def key(self) -> str: ...
    @property
    def sort_key(self) -> str | None: ...
    @property
    def owner(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def version(self) -> str: ...
    @property
    def lease(self) -> float: ...
    @property
    def remaining(self) -> float: ...
    @property
    def is_safe(self) -> bool: ...
    @property
    def state(self) -> LeaseState: ...
    @property
    def lost_reason(self) -> LostReason | None: ...
    @property
    def data(self) -> bytes | None: ...
    @property
    def took_over(self) -> Takeover | None: ...
    @property
    def held(self) -> bool: ...
    @property
    def slot(self) -> int | None: ...
    def set_data(self, data: bytes | bytearray | memoryview | None) -> None: ...
    def set_data_async(self, data: bytes | bytearray | memoryview | None) -> Awaitable[None]: ...
    def release(self, *, data: bytes | bytearray | memoryview | None = None, delete: bool = False) -> None: ...
    def release_async(
        self, *, data: bytes | bytearray | memoryview | None = None, delete: bool = False
    ) -> Awaitable[None]: ...
    def detach(self) -> str: ...
    def detach_async(self) -> Awaitable[str]: ...
    def upgrade(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock: ...
    def upgrade_async(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Awaitable[Lock]: ...
    def until_unsafe(self) -> Awaitable[LostReason]:
        """Stop work on this: resolves the moment the lease is no longer safe (in danger, lost or released)."""
    def wait_unsafe(self, timeout: Seconds | None = None) -> LostReason | None: ...
    def run_while_safe(self, work: Awaitable[T]) -> Coroutine[Any, Any, T]: ...
    def until_ended(self) -> Awaitable[LostReason]:
        """Resolves once the lease is over for good (stolen, expired, released); later than until_unsafe()."""
    def wait_ended(self, timeout: Seconds | None = None) -> LostReason | None: ...
    def _begin_work(self) -> WorkInProgress: ...
    @deprecated("lost() is until_unsafe() under its old name")
    def lost(self) -> Awaitable[LostReason]: ...
    @deprecated("wait_lost() is wait_unsafe() under its old name")
    def wait_lost(self, timeout: Seconds | None = None) -> LostReason | None: ...
    @deprecated("run_until_lost() is run_while_safe() under its old name")
    def run_until_lost(self, work: Awaitable[T]) -> Coroutine[Any, Any, T]: ...
    def __enter__(self) -> Lock: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]: ...
    def __aenter__(self) -> Awaitable[Lock]: ...
    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[bool]: ...

@final
class RwLock:
    """A reader-writer lock (wrapped by ``lease_lock.RwLock``)."""

    @property
    def name(self) -> str: ...
    @property
    def max_readers(self) -> int: ...
    def acquire(
        self,
        mode: Literal["read", "upgradeable", "write"],
        try_once: bool,
        is_async: bool,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Any: ...

@final
class Semaphore:
    """A counting semaphore."""

    @property
    def name(self) -> str: ...
    @property
    def permits(self) -> int: ...
    def acquire(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Lock: ...
    def acquire_async(
        self,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Awaitable[Lock]: ...
    def try_acquire(
        self,
        *,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Lock | None: ...
    def try_acquire_async(
        self,
        *,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
    ) -> Awaitable[Lock | None]: ...

@final
class Leadership:
    """A leadership won by an ``Election``."""

    @property
    def key(self) -> str: ...
    @property
    def sort_key(self) -> str | None: ...
    @property
    def fence(self) -> int: ...
    @property
    def is_safe(self) -> bool: ...
    @property
    def remaining(self) -> float: ...
    @property
    def data(self) -> bytes | None: ...
    def until_unsafe(self) -> Awaitable[LostReason]: ...
    def wait_unsafe(self, timeout: Seconds | None = None) -> LostReason | None: ...
    def until_ended(self) -> Awaitable[LostReason]: ...
    def wait_ended(self, timeout: Seconds | None = None) -> LostReason | None: ...
    def _begin_work(self) -> WorkInProgress: ...
    @deprecated("lost() is until_unsafe() under its old name")
    def lost(self) -> Awaitable[LostReason]: ...
    @deprecated("wait_lost() is wait_unsafe() under its old name")
    def wait_lost(self, timeout: Seconds | None = None) -> LostReason | None: ...

@final
class WorkInProgress:
    """Work running under a lock; a release waits for ``end()`` before it writes."""

    def end(self) -> None: ...

@final
class Election:
    """A candidate in a leader election."""

    @property
    def key(self) -> str: ...
    @property
    def sort_key(self) -> str | None: ...
    @property
    def role(self) -> Role: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def terms(self) -> int: ...
    @property
    def campaigning(self) -> bool: ...
    def leadership(self, timeout: Seconds | None = None) -> Leadership | None: ...
    def leadership_async(self, timeout: Seconds | None = None) -> Awaitable[Leadership | None]: ...
    def wait_role_change(self, timeout: Seconds | None = None) -> Role | None: ...
    def wait_role_change_async(self, timeout: Seconds | None = None) -> Awaitable[Role | None]: ...
    def resign(self) -> None: ...
    def resign_async(self) -> Awaitable[None]: ...
    def lead(self, work: Callable[[Leadership], Awaitable[T]]) -> Coroutine[Any, Any, T]: ...
    def __enter__(self) -> Election: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]: ...
    def __aenter__(self) -> Awaitable[Election]: ...
    def __aexit__(self, exc_type: object, exc: object, tb: object) -> Awaitable[None]: ...

@final
class Client:
    def __new__(
        cls,
        store: MemoryStore | DynamoDBStore | PostgresStore | BucketStore | EtcdStore | RedisStore,
        owner: str | None = None,
        lease: float | None = None,
        heartbeat: float | None = None,
        refresh: float | None = None,
        max_clock_drift: float | None = None,
        safety_margin: float | None = None,
        shutdown_timeout: float | None = None,
        heartbeat_rate_limit: int | None = None,
        max_clock_difference: float | None = None,
        use_store_clock: bool = True,
        lock_delay: float | None = None,
    ) -> Self: ...
    @property
    def owner(self) -> str: ...
    @property
    def lease(self) -> float: ...
    @property
    def heartbeat(self) -> float: ...
    def acquire(
        self,
        key: str,
        sort_key: str | None,
        try_once: bool,
        is_async: bool,
        wait: float | None,
        lease: float | None,
        data: bytes | None,
        min_hold: float | None,
        max_hold: float | None,
        refresh: float | None,
        busy_unless_dead: bool,
        only_if_exists: bool,
        reentrant: bool,
        delete_on_release: bool,
        on_unsafe: Any,
    ) -> Any: ...
    def elect(
        self,
        key: str,
        sort_key: str | None,
        lease: float | None,
        data: bytes | None,
        retry_min: float | None,
        retry_max: float | None,
    ) -> Election: ...
    def semaphore(self, name: str, permits: int) -> Semaphore: ...
    def rw_lock(self, name: str, max_readers: int) -> RwLock: ...
    def acquire_all(
        self,
        keys: list[tuple[str, str | None]],
        is_async: bool,
        *,
        wait: Seconds | None = None,
        lease: Seconds | None = None,
        data: bytes | bytearray | memoryview | None = None,
        min_hold: Seconds | None = None,
        max_hold: Seconds | None = None,
        refresh: Seconds | None = None,
    ) -> Any: ...
    def get_lock(self, key: str, sort_key: str | None, is_async: bool) -> Any: ...
    def list_locks(self, partition: str | None, is_async: bool) -> Any: ...
    def force_release(self, key: str, sort_key: str | None, is_async: bool) -> Any: ...
    def release_version(self, key: str, sort_key: str | None, version: str, is_async: bool) -> Any: ...
    def held_keys(self) -> list[tuple[str, str | None]]: ...
    def close(self, is_async: bool) -> Any: ...

def next_events(timeout: float) -> list[tuple[Any, ...]]: ...
def set_log_level(level: int) -> None: ...
def wake_events() -> None: ...
def after_fork_in_child() -> None: ...
def _panicking_call() -> None: ...
def _fence_of(lock: Lock) -> tuple[str, int]: ...
def _fence_key(key: str, sort: str | None = None) -> str: ...
def _dynamodb_fence(
    resource: str,
    lock_key: str,
    fence: int,
    fence_attribute: str,
    lock_attribute: str,
    condition: str | None,
    update: str | None,
    updating: bool,
) -> dict[str, Any]: ...
def _check_fence(resource: str, current_lock: str, current_fence: int, lock_key: str, fence: int) -> None: ...
def _postgres_fence_arguments(resource: str, lock_key: str, fence: int) -> int: ...
def metrics() -> list[Metric]: ...
