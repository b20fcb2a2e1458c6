"""Not a test module: type-checked by ./scripts/test (mypy --strict) to prove the
stubs describe the API as users call it. Each line with ``type: ignore`` must
stay an error (mypy's warn_unused_ignores fails the check otherwise)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import lease_lock
from lease_lock import (
    Election,
    HistogramValue,
    LeaseState,
    Leadership,
    Lock,
    LockClient,
    LockInfo,
    LostReason,
    Metric,
    Role,
    Semaphore,
    RwLock,
    LockGroup,
)


def blocking(client: LockClient) -> int:
    with client.lock("report", wait=timedelta(seconds=30), sort_key=None) as lock:
        fence: int = lock.fence
        remaining: float = lock.remaining
        state: LeaseState = lock.state
        data: bytes | None = lock.data
        lock.set_data(b"x")
        assert remaining >= 0 and state and data is None
    maybe: Lock | None = client.try_acquire("k", lease=5)
    if maybe is not None:
        maybe.release(data=b"done")
    reason: LostReason | None = client.acquire("k", wait=0).wait_unsafe(timeout=1.5)
    infos: list[LockInfo] = client.list_locks(partition="p")
    client.acquire("k", wait="5")  # type: ignore[arg-type]
    client.acquire(5)  # type: ignore[arg-type]
    del reason, infos
    return fence


async def awaiting(client: LockClient) -> str:
    async with client.lock("report") as lock:
        reason: LostReason = await lock.until_unsafe()
        result: str = await lock.run_while_safe(asyncio.sleep(1, result="done"))
        del reason
    acquired: Lock = await client.acquire_async("k", on_unsafe=lambda reason: print(reason.kind))
    await acquired.release_async()
    info: LockInfo | None = await client.get_lock_async("k")
    report = await client.close_async()
    del info, report
    return result


def stores() -> None:
    lease_lock.DynamoDBStore("locks", layout="python-dynamodb-lock", region="eu-west-1")
    lease_lock.PostgresStore("postgres://localhost/db", table="locks")
    LockClient(lease_lock.MemoryStore(), owner="me", lease=timedelta(seconds=10), heartbeat=2)
    LockClient("not a store")  # type: ignore[arg-type]
    try:
        pass
    except lease_lock.AcquireTimeout as error:
        holder: str | None = error.holder
        retry: bool = error.retryable
        del holder, retry


def returns_inside_with(client: LockClient) -> int:
    # A Lock's with block never swallows exceptions: mypy sees the return.
    with client.acquire("k") as lock:
        return lock.fence


async def store_setup(store: lease_lock.DynamoDBStore) -> list[str]:
    store.create_table(exist_ok=True)
    await store.create_table(exist_ok=True, is_async=True)
    warnings: list[str] = store.validate_table()
    return warnings + await store.validate_table(is_async=True)


def drop_in(resource: object) -> int | None:
    # python-dynamodb-lock 0.9.1's API, as its users call it.
    from lease_lock.python_dynamodb_lock import (
        DynamoDBLock,
        DynamoDBLockClient,
        DynamoDBLockError,
        datetime,
    )

    client = DynamoDBLockClient(resource, heartbeat_period=datetime.timedelta(seconds=5))
    lock: DynamoDBLock = client.acquire_lock(
        "k", retry_timeout=datetime.timedelta(seconds=1), additional_attributes={"a": 1},
        app_callback=lambda code, lock: print(code, lock.unique_identifier),
    )
    with lock:
        status: str = lock.status
        del status
    try:
        client.release_lock(lock, best_effort=False)
    except DynamoDBLockError as error:
        code: str = error.code
        del code
    client.close(release_locks=True)
    client.acquire_lock(5)  # type: ignore[arg-type]
    return lock.fence


def electing(client: LockClient) -> int:
    with client.elect("leader", lease=timedelta(seconds=10), data=b"addr") as election:
        role: Role = election.role
        leadership: Leadership | None = election.leadership(timeout=5)
        changed: Role | None = election.wait_role_change(timeout=1)
        client.elect("leader", retry_min="1")  # type: ignore[arg-type]
        del role, changed
        return leadership.fence if leadership is not None else 0


async def leading(client: LockClient) -> int:
    election: Election = client.elect("leader")
    async with election:
        fence: int = await election.lead(lambda leadership: asyncio.sleep(0, result=leadership.fence))
    return fence


def limiting(client: LockClient) -> int | None:
    exports: Semaphore = client.semaphore("exports", 4)
    with exports.acquire(wait=timedelta(seconds=30), data=b"x") as permit:
        slot: int | None = permit.slot
    maybe: Lock | None = exports.try_acquire(lease=5)
    exports.acquire(wait="5")  # type: ignore[arg-type]
    del maybe
    return slot


def sharing(client: LockClient) -> int:
    config: RwLock = client.rw_lock("config", 16)
    with config.read(wait=timedelta(seconds=5)) as read:
        fence: int = read.fence
        data: bytes | None = read.data
    upgradeable: Lock = config.upgradeable_read(wait=5)
    write: Lock = upgradeable.upgrade(wait=5, data=b"v2")
    write.release(data=b"v3")
    maybe: Lock | None = config.try_write(lease=5)
    config.write(wait="5")  # type: ignore[arg-type]
    del data, maybe
    return fence


async def sharing_async(client: LockClient) -> int:
    config = client.rw_lock("config", 16)
    async with await config.write_async(wait=5) as write:
        fence: int = write.fence
    read: Lock | None = await config.try_read_async()
    del read
    return fence


def moving(client: LockClient) -> dict[str | tuple[str, str], int]:
    with client.lock_all(["account-7", ("ledger", "2026")], wait=10) as group:
        fences = group.fences
        safe: bool = group.is_safe
        members: tuple[Lock, ...] = group.locks
    held: LockGroup = client.acquire_all(["a", "b"], lease=timedelta(seconds=30))
    held.release()
    client.acquire_all([1, 2])  # type: ignore[list-item]
    del safe, members
    return fences


async def moving_async(client: LockClient) -> int:
    async with client.lock_all(["a", "b"]) as group:
        await group.run_while_safe(asyncio.sleep(0))
    other: LockGroup = await client.acquire_all_async(["c"])
    await other.release_async()
    return len(group.locks)


def measured() -> float:
    figures: list[Metric] = lease_lock.metrics()
    total = 0.0
    for metric in figures:
        value = metric["value"]
        if isinstance(value, dict):
            summary: HistogramValue = value
            total += summary["sum"]
        else:
            total += value
    metric["name"] = 3  # type: ignore[typeddict-item]
    return total
