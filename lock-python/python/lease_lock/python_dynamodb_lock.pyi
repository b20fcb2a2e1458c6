"""Types of lease_lock.python_dynamodb_lock, python-dynamodb-lock 0.9.1's API."""

import datetime as datetime
import logging as logging
import socket as socket
import threading as threading
import time as time
import uuid as uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from concurrent.futures import ThreadPoolExecutor as ThreadPoolExecutor
from decimal import Decimal as Decimal
from typing import Any, ClassVar, Literal
from urllib.parse import quote as quote

#: botocore's ClientError (botocore ships no type stubs).
ClientError: type[Exception]

logger: logging.Logger

#: A period: 0.9.1 takes a ``timedelta``; seconds are accepted too.
_Period = datetime.timedelta | float

#: ``app_callback(code, lock)``.
_AppCallback = Callable[[str, "DynamoDBLock"], object]

class DynamoDBLockClient:
    _DEFAULT_TABLE_NAME: ClassVar[str]
    _DEFAULT_PARTITION_KEY_NAME: ClassVar[str]
    _DEFAULT_SORT_KEY_NAME: ClassVar[str]
    _DEFAULT_TTL_ATTRIBUTE_NAME: ClassVar[str]
    _DEFAULT_HEARTBEAT_PERIOD: ClassVar[datetime.timedelta]
    _DEFAULT_SAFE_PERIOD: ClassVar[datetime.timedelta]
    _DEFAULT_LEASE_DURATION: ClassVar[datetime.timedelta]
    _DEFAULT_EXPIRY_PERIOD: ClassVar[datetime.timedelta]
    _DEFAULT_HEARTBEAT_TPS: ClassVar[int]
    _DEFAULT_APP_CALLBACK_THREADPOOL_SIZE: ClassVar[int]
    _DEFAULT_READ_CAPACITY: ClassVar[int]
    _DEFAULT_WRITE_CAPACITY: ClassVar[int]
    _DEFAULT_SORT_KEY_VALUE: ClassVar[str]
    _COL_OWNER_NAME: ClassVar[str]
    _COL_LEASE_DURATION: ClassVar[str]
    _COL_RECORD_VERSION_NUMBER: ClassVar[str]
    _COL_FENCE: ClassVar[str]

    def __init__(
        self,
        dynamodb_resource: Any,
        table_name: str = ...,
        partition_key_name: str = ...,
        sort_key_name: str = ...,
        ttl_attribute_name: str = ...,
        owner_name: str | None = None,
        heartbeat_period: _Period = ...,
        safe_period: _Period = ...,
        lease_duration: _Period = ...,
        expiry_period: _Period = ...,
        heartbeat_tps: float = ...,
        app_callback_executor: Executor | None = None,
        keep_released_records: bool = False,
        max_clock_difference: _Period | None = None,
    ) -> None: ...
    def acquire_lock(
        self,
        partition_key: str,
        sort_key: str = ...,
        retry_period: _Period | None = None,
        retry_timeout: _Period | None = None,
        additional_attributes: Mapping[str, Any] | None = None,
        app_callback: _AppCallback | None = None,
    ) -> DynamoDBLock: ...
    def release_lock(self, lock: DynamoDBLock, best_effort: bool = True) -> None: ...
    def close(self, release_locks: bool = False) -> None: ...
    @classmethod
    def create_dynamodb_table(
        cls,
        dynamodb_client: Any,
        table_name: str = ...,
        partition_key_name: str = ...,
        sort_key_name: str = ...,
        ttl_attribute_name: str = ...,
        read_capacity: int = ...,
        write_capacity: int = ...,
    ) -> None: ...

class BaseDynamoDBLock:
    partition_key: str
    sort_key: str
    owner_name: str
    lease_duration: float
    record_version_number: str | None
    expiry_time: int | None
    additional_attributes: dict[str, Any]
    unique_identifier: str
    def __init__(
        self,
        partition_key: str,
        sort_key: str,
        owner_name: str,
        lease_duration: float,
        record_version_number: str | None,
        expiry_time: int | None,
        additional_attributes: Mapping[str, Any] | None,
    ) -> None: ...

class DynamoDBLock(BaseDynamoDBLock):
    PENDING: ClassVar[str]
    LOCKED: ClassVar[str]
    RELEASED: ClassVar[str]
    IN_DANGER: ClassVar[str]
    INVALID: ClassVar[str]
    app_callback: _AppCallback | None
    lock_client: DynamoDBLockClient
    last_updated_time: float
    thread_lock: threading.RLock
    status: str
    def __init__(
        self,
        partition_key: str,
        sort_key: str,
        owner_name: str,
        lease_duration: float,
        record_version_number: str | None,
        expiry_time: int | None,
        additional_attributes: Mapping[str, Any] | None,
        app_callback: _AppCallback | None,
        lock_client: DynamoDBLockClient,
    ) -> None: ...
    @property
    def fence(self) -> int | None: ...
    def __enter__(self) -> DynamoDBLock: ...
    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> Literal[False]: ...
    def release(self, best_effort: bool = True) -> None: ...

class DynamoDBLockError(Exception):
    CLIENT_SHUTDOWN: ClassVar[str]
    ACQUIRE_TIMEOUT: ClassVar[str]
    LOCK_NOT_OWNED: ClassVar[str]
    LOCK_STOLEN: ClassVar[str]
    LOCK_IN_DANGER: ClassVar[str]
    UNKNOWN: ClassVar[str]
    code: str
    message: str
    def __init__(self, code: str = "UNKNOWN", message: str = "Unknown error") -> None: ...
