"""Fences checked at your own resources: DynamoDB items, PostgreSQL rows, objects in a bucket.

A lease alone cannot stop a holder that was paused (a long GC pause, a
frozen VM, a slow network) past its lease from writing after the next holder
did. A fence can, if the resource refuses a lower one. Each helper here
makes your own write carry the lock's fence, in one request, and the store
refuse it once a newer holder of the lock wrote:

* **DynamoDB items**: :func:`dynamodb_put_item`, :func:`dynamodb_update_item`
  and :func:`dynamodb_delete_item` return the keyword arguments of your
  boto3 call with the fence's condition joined to yours and the fence
  written by the same request; :func:`dynamodb_refusal` tells a refused
  fence from your own condition failing.
* **PostgreSQL rows**: :func:`postgres_admit_fence` calls the fence
  function (``PostgresStore.create_fence_guard()`` creates it) inside your
  transaction, so a stale holder's whole transaction rolls back.
* **Objects in a bucket**: ``BucketStore.fenced_put`` and
  ``BucketStore.fenced_get``.

Each helper takes a held :class:`~lease_lock.Lock`, or a :class:`FenceToken`
(a lock's key and fence from elsewhere: ``FenceToken.from_env()`` in a
command that ``lockctl run`` started).

A refusal raises (or returns) :class:`StaleFence` (a newer holder wrote) or
:class:`OtherLockFence` (another lock guards the resource), both
:class:`FenceRefused`. Python and Rust writers of one resource agree: the
expressions, the SQL function and the rule are the Rust crates'.

>>> import lease_lock
>>> from lease_lock import fencing
>>> client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="worker-1")
>>> with client.lock("orders/42") as lock:
...     request = fencing.dynamodb_update_item(
...         lock,
...         TableName="orders",
...         Key={"id": {"S": "42"}},
...         UpdateExpression="SET #s = :s",
...         ExpressionAttributeNames={"#s": "status"},
...         ExpressionAttributeValues={":s": {"S": "shipped"}},
...     )
>>> request["UpdateExpression"]
'SET #lease_lock_fence = :lease_lock_fence, #lease_lock_fence_lock = :lease_lock_fence_lock, #s = :s'
>>> request["ExpressionAttributeValues"][":lease_lock_fence"]
{'N': '1'}
>>> client.close()["released"]
[]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from . import _native
from ._errors import FenceRefused, InvalidInput, OtherLockFence, StaleFence
from ._native import Lock

__all__ = [
    "FenceToken",
    "FENCE_ATTRIBUTE",
    "FENCE_LOCK_ATTRIBUTE",
    "FenceRefused",
    "StaleFence",
    "OtherLockFence",
    "dynamodb_put_item",
    "dynamodb_update_item",
    "dynamodb_delete_item",
    "dynamodb_refusal",
    "postgres_admit_fence",
    "STALE_FENCE_SQLSTATE",
    "OTHER_LOCK_SQLSTATE",
]

#: The item attribute a DynamoDB item's fence is kept in, unless renamed.
FENCE_ATTRIBUTE = "fence"
#: The item attribute the key of the fence's lock is kept in, unless renamed.
FENCE_LOCK_ATTRIBUTE = "fence_lock"
#: The SQLSTATE the PostgreSQL fence function raises for a stale fence.
STALE_FENCE_SQLSTATE = "LLF01"
#: The SQLSTATE it raises for a fence of another lock.
OTHER_LOCK_SQLSTATE = "LLF02"


@dataclass(frozen=True)
class FenceToken:
    """A lock's name as fences give it, and a fence it granted.

    The name is the lock's key as it prints: ``partition``, or
    ``partition/sort`` for a lock under a sort key, with ``%`` written ``%25``
    and ``/`` written ``%2F`` inside either part (so ``"jobs/nightly"`` without
    a sort key is ``jobs%2Fnightly``); for a read or write of a reader-writer
    lock, its write lock's key (``config/writer``, or ``config#writer`` on a
    store without sort keys). A name no key prints as is refused
    (:class:`~lease_lock.InvalidInput`) when the token is used.
    """

    key: str
    fence: int

    @classmethod
    def of(cls, lock: Lock) -> FenceToken:
        """The name and fence of a held lock (a read of a reader-writer lock: the write lock's name and the writer fence it was admitted with, ``lock.fence``)."""
        key, fence = _native._fence_of(lock)
        return cls(key, fence)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FenceToken:
        """The lock of the command ``lockctl run`` started: ``LOCK_FENCE_KEY`` and ``LOCK_FENCE``.

        Under an older ``lockctl``, which does not give ``LOCK_FENCE_KEY``,
        the name is made from ``LOCK_KEY`` and ``LOCK_SORT_KEY`` (not right
        for a ``--shared`` or ``--exclusive`` run: such a ``lockctl`` did not
        give the lock's fence name).
        """
        env = os.environ if environ is None else environ
        try:
            key, fence = env["LOCK_KEY"], env["LOCK_FENCE"]
        except KeyError as missing:
            raise InvalidInput(f"{missing.args[0]} is not set: run this under `lockctl run`") from None
        if not fence.isdigit():
            raise InvalidInput(f"LOCK_FENCE={fence!r} is not a fence")
        name = env.get("LOCK_FENCE_KEY")
        if name is None:
            name = _native._fence_key(key, env.get("LOCK_SORT_KEY"))
        return cls(name, int(fence))


#: What a helper takes: a held lock, or a lock's key and fence.
Fenced = Union[Lock, FenceToken]


def _token(lock: Fenced) -> FenceToken:
    if isinstance(lock, FenceToken):
        return lock
    if isinstance(lock, Lock):
        return FenceToken.of(lock)
    raise TypeError(f"lock must be a held lease_lock.Lock or a FenceToken, not {type(lock).__name__}")


def dynamodb_put_item(
    lock: Fenced,
    /,
    *,
    resource: str | None = None,
    fence_attribute: str = FENCE_ATTRIBUTE,
    lock_attribute: str = FENCE_LOCK_ATTRIBUTE,
    typed: bool = True,
    **request: Any,
) -> dict[str, Any]:
    """The keyword arguments of a ``put_item`` (or a transaction's ``Put``), fenced with ``lock``'s fence.

    ``request`` is what you would pass to boto3 (``TableName``, ``Item``, and
    a ``ConditionExpression`` of your own if any, as a string). The result
    adds the condition "no fence on the item yet, or this lock's fence and
    not higher than ours", the fence and lock key to ``Item``, and
    ``ReturnValuesOnConditionCheckFailure="ALL_OLD"`` (for
    :func:`dynamodb_refusal`). ``typed=False`` for the boto3 resource API
    (``Table.put_item``), whose values are plain Python values.
    ``resource`` names the item in errors (default: the table's name).
    """
    fenced = _fence(lock, request, "Item", resource, fence_attribute, lock_attribute, typed, updating=False)
    item = dict(_mapping(request, "Item"))
    item[fence_attribute] = _value(fenced["fence_value"][1], "N", typed)
    item[lock_attribute] = _value(fenced["lock_value"][1], "S", typed)
    return {**_merged(request, fenced, typed), "Item": item}


def dynamodb_update_item(
    lock: Fenced,
    /,
    *,
    resource: str | None = None,
    fence_attribute: str = FENCE_ATTRIBUTE,
    lock_attribute: str = FENCE_LOCK_ATTRIBUTE,
    typed: bool = True,
    **request: Any,
) -> dict[str, Any]:
    """The keyword arguments of an ``update_item`` (or a transaction's ``Update``), fenced with ``lock``'s fence.

    As :func:`dynamodb_put_item`; the fence is written by a ``SET`` joined
    to your ``UpdateExpression`` (or one is added).
    """
    fenced = _fence(lock, request, "Key", resource, fence_attribute, lock_attribute, typed, updating=True)
    return {**_merged(request, fenced, typed), "UpdateExpression": fenced["update"]}


def dynamodb_delete_item(
    lock: Fenced,
    /,
    *,
    resource: str | None = None,
    fence_attribute: str = FENCE_ATTRIBUTE,
    lock_attribute: str = FENCE_LOCK_ATTRIBUTE,
    typed: bool = True,
    **request: Any,
) -> dict[str, Any]:
    """The keyword arguments of a ``delete_item`` (or a transaction's ``Delete``), fenced with ``lock``'s fence.

    A delete removes the item's fence with the item, so a stale holder could
    create it again afterwards; where that matters, mark the item deleted
    with :func:`dynamodb_update_item` instead.
    """
    fenced = _fence(lock, request, "Key", resource, fence_attribute, lock_attribute, typed, updating=False)
    return _merged(request, fenced, typed)


def dynamodb_refusal(
    lock: Lock,
    error: BaseException,
    /,
    *,
    resource: str | None = None,
    item_index: int | None = None,
    fence_attribute: str = FENCE_ATTRIBUTE,
    lock_attribute: str = FENCE_LOCK_ATTRIBUTE,
) -> FenceRefused | None:
    """The refused fence a fenced write's ``ClientError`` means, or ``None`` if it is something else.

    ``None`` also when the item admits the fence (your own condition
    failed). For a ``transact_write_items``, ``item_index`` is the fenced
    write's place in ``TransactItems``. Typically::

        try:
            dynamodb.update_item(**fencing.dynamodb_update_item(lock, **request))
        except botocore.exceptions.ClientError as error:
            refused = fencing.dynamodb_refusal(lock, error)
            if refused is not None:
                raise refused from error
            raise
    """
    response = getattr(error, "response", None)
    if not isinstance(response, Mapping):
        return None
    if item_index is None:
        item = response.get("Item")
    else:
        reasons = response.get("CancellationReasons") or []
        reason = reasons[item_index] if 0 <= item_index < len(reasons) else {}
        item = reason.get("Item") if reason.get("Code") == "ConditionalCheckFailed" else None
    if not isinstance(item, Mapping):
        return None
    fence = _plain(item.get(fence_attribute), "N")
    fenced_by = _plain(item.get(lock_attribute), "S")
    if fence is None:
        return None
    try:
        current = int(str(fence))
    except ValueError:
        return None
    name = resource if resource is not None else "the item"
    token = _token(lock)
    try:
        _native._check_fence(name, str(fenced_by or ""), current, token.key, token.fence)
    except FenceRefused as refused:
        return refused
    return None


def postgres_admit_fence(
    cursor: Any,
    lock: Fenced,
    resource: str,
    /,
    *,
    function: str = '"locks_admit_fence"',
) -> None:
    """Admit ``lock``'s fence for ``resource`` inside the transaction of ``cursor``, or raise.

    ``cursor`` is a DB-API cursor of psycopg (3) or psycopg2, in the
    transaction that writes the resource; ``function`` the fence function
    (``store.fence_function`` of a :class:`~lease_lock.PostgresStore`, whose
    ``create_fence_guard()`` creates it). Raises :class:`StaleFence` if a
    newer holder of the lock admitted a higher fence for the resource,
    :class:`OtherLockFence` if another lock fences it (the transaction is
    aborted: roll it back), and :class:`~lease_lock.InvalidInput` before
    sending anything for a resource the fence table cannot hold.
    """
    token = _token(lock)
    arguments = (resource, token.key, _native._postgres_fence_arguments(resource, token.key, token.fence))
    try:
        cursor.execute(f"SELECT {function}(%s, %s, %s)", arguments)
    except Exception as error:
        state = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        diag = getattr(error, "diag", None)
        detail = str(getattr(diag, "message_detail", "") or "")
        lock_key = arguments[1]
        if state == STALE_FENCE_SQLSTATE:
            refusal: tuple[str, int] = (lock_key, int(detail) if detail.isdigit() else 0)
        elif state == OTHER_LOCK_SQLSTATE:
            refusal = (detail, 0)
        else:
            raise
        try:
            _native._check_fence(resource, refusal[0], refusal[1], token.key, token.fence)
        except FenceRefused as refused:
            raise refused from error
        raise


def _fence(
    lock: Fenced,
    request: Mapping[str, Any],
    key_field: str,
    resource: str | None,
    fence_attribute: str,
    lock_attribute: str,
    typed: bool,
    *,
    updating: bool,
) -> dict[str, Any]:
    """The fence's expressions for ``request``, checked."""
    token = _token(lock)
    if key_field not in request:
        raise InvalidInput(f"the request has no {key_field}: pass the keyword arguments of your boto3 call")
    condition = request.get("ConditionExpression")
    update = request.get("UpdateExpression")
    for name, expression in (("ConditionExpression", condition), ("UpdateExpression", update)):
        if expression is not None and not isinstance(expression, str):
            raise InvalidInput(
                f"{name} must be a string to be fenced, not {type(expression).__name__} "
                "(write a boto3.dynamodb.conditions expression as text with placeholders)"
            )
    name = resource if resource is not None else str(request.get("TableName", "the item"))
    fenced: dict[str, Any] = _native._dynamodb_fence(
        name, token.key, token.fence, fence_attribute, lock_attribute, condition, update, updating
    )
    for placeholder, _ in fenced["names"]:
        if placeholder in _mapping(request, "ExpressionAttributeNames"):
            raise InvalidInput(f"the request already uses the placeholder {placeholder}")
    return fenced


def _merged(request: Mapping[str, Any], fenced: Mapping[str, Any], typed: bool) -> dict[str, Any]:
    """``request`` with the fence's condition, placeholders and ``ALL_OLD``."""
    names = dict(_mapping(request, "ExpressionAttributeNames"))
    names.update(dict(fenced["names"]))
    values = dict(_mapping(request, "ExpressionAttributeValues"))
    fence_name, fence = fenced["fence_value"]
    lock_name, lock_key = fenced["lock_value"]
    values[fence_name] = _value(fence, "N", typed)
    values[lock_name] = _value(lock_key, "S", typed)
    return {
        **request,
        "ConditionExpression": fenced["condition"],
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def _mapping(request: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    value = request.get(field) or {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{field} must be a mapping, not {type(value).__name__}")
    return value


def _value(text: str, kind: str, typed: bool) -> Any:
    """A value as the low-level client (``{"N": "7"}``) or the resource API (``7``) sends it."""
    if typed:
        return {kind: text}
    return int(text) if kind == "N" else text


def _plain(value: Any, kind: str) -> Any:
    """A value of a returned item, typed or plain."""
    if isinstance(value, Mapping):
        return value.get(kind)
    return value

