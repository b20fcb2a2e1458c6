"""DynamoDB specifics: every table layout, a named profile, table set-up errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import lease_lock
from lease_lock import LockClient

from conftest import DYNAMODB, _need, make_dynamodb_store


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sort_key": "sk"},
        {"layout": "python-dynamodb-lock"},
        {"layout": "python-dynamodb-lock", "partition_key": "name", "no_sort_key": True},
        {"layout": "java"},
    ],
    ids=["native", "native-sort-key", "python-dynamodb-lock", "renamed-keys", "java"],
)
def test_every_layout_holds_and_hands_over(options: dict[str, object]) -> None:
    store = make_dynamodb_store(**options)
    alice = LockClient(store, owner="alice")
    bob = LockClient(store, owner="bob")
    lock = alice.acquire("job", data=b"d")
    assert bob.try_acquire("job") is None
    lock.release()
    again = bob.acquire("job", wait=0)
    assert again.fence > 0 and again.owner == "bob"
    again.release()
    alice.close()
    bob.close()


def test_layout_names_are_lockctls_and_rusts_with_the_old_spellings_as_aliases() -> None:
    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    for alias, name in [("default", "native"), ("python", "python-dynamodb-lock")]:
        store = make_dynamodb_store(layout=alias)
        twin = lease_lock.DynamoDBStore(store.table, layout=name, endpoint_url=endpoint, region="us-east-1")
        assert twin.validate_table() == store.validate_table()
        client, twin_client = LockClient(store), LockClient(twin)
        lock = client.acquire("k", wait=0)
        info = twin_client.get_lock("k")
        assert info is not None and info.owner == client.owner
        lock.release()
        client.close()
        twin_client.close()


def test_durations_take_timedelta_in_the_table_calls_too() -> None:
    from datetime import timedelta

    _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    store = make_dynamodb_store()
    store.delete_table(wait=timedelta(seconds=60))
    store.create_table(wait=timedelta(seconds=60))
    assert store.validate_table() == []


def test_a_missing_table_and_a_bad_layout_say_what_to_change() -> None:
    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    with pytest.raises(lease_lock.InvalidInput, match="use native, python-dynamodb-lock or java"):
        lease_lock.DynamoDBStore("locks", layout="pyhton", endpoint_url=endpoint, region="us-east-1")
    with pytest.raises(lease_lock.InvalidInput, match="pass one of them"):
        lease_lock.DynamoDBStore("locks", sort_key="s", no_sort_key=True, endpoint_url=endpoint, region="us-east-1")
    missing = lease_lock.DynamoDBStore(f"missing-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint, region="us-east-1")
    with pytest.raises(lease_lock.StoreSetupError):
        missing.validate_table()
    client = LockClient(missing)
    with pytest.raises(lease_lock.StoreError) as raised:
        client.acquire("k", wait=0)
    assert raised.value.kind == "not_found" and not raised.value.retryable
    client.close()
    store = make_dynamodb_store()
    store.create_table(exist_ok=True)  # validated, not an error
    with pytest.raises(lease_lock.StoreSetupError, match="already exists"):
        store.create_table()


def test_a_named_profile_supplies_region_and_credentials(tmp_path: Path) -> None:
    endpoint = _need(os.environ.get("LOCK_DYNAMODB_AUTH_ENDPOINT"), "LOCK_DYNAMODB_AUTH_ENDPOINT")
    (tmp_path / "config").write_text("[profile locks]\nregion = us-east-1\n")
    (tmp_path / "credentials").write_text(
        "[locks]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        % (os.environ["LOCK_AUTH_GOOD_KEY"], os.environ["LOCK_AUTH_GOOD_SECRET"])
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
               AWS_EC2_METADATA_DISABLED="true")
    table = f"py-profile-{uuid.uuid4().hex[:8]}"
    script = f"""
        import lease_lock
        store = lease_lock.DynamoDBStore({table!r}, endpoint_url={endpoint!r}, profile="locks")
        store.create_table(wait=60)
        client = lease_lock.LockClient(store)
        lock = client.acquire("k")
        print(lock.fence, client.get_lock("k").fence)
        client.close()
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    fence, recorded = done.stdout.split()
    assert int(fence) >= 1 and fence == recorded


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_workers_started_by_multiprocessing_take_turns(start: str) -> None:
    """Each worker makes its own store and client (nothing crosses the process boundary)."""
    import multiprocessing

    import mp_worker

    endpoint = _need(DYNAMODB, "LOCK_DYNAMODB_ENDPOINT")
    store = make_dynamodb_store()
    context = multiprocessing.get_context(start)
    fences = context.Queue()
    workers = [
        context.Process(target=mp_worker.take_turn, args=(endpoint, store.table, "turns", fences))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    taken = sorted(fences.get(timeout=5) for _ in workers)
    assert taken[0] >= 1 and taken == [taken[0], taken[0] + 1, taken[0] + 2]
