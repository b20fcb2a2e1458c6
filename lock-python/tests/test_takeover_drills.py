"""Drills with real processes: a holder is killed with SIGKILL, and a fresh
process takes its lock as soon as the lease has passed, counted from the
holder's last write by the store's clock (PostgreSQL) or by wall clocks
within a declared bound (DynamoDB, S3), instead of after watching the record
for a whole lease. Each attempt is a new client (or a new ``lockctl run
--wait 0s``), so nothing is remembered between attempts: only the store's
time can let one through. Right before, the same attempt with the rule off
(no bound, or ``--no-store-clock``) is refused.

On PostgreSQL, DynamoDB (moto) and S3 (moto); with the Python API and
``lockctl``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lease_lock

from test_fencing_drills import SPECS, WORKER, descendants, env, lockctl, lockctl_args, wait_for

LEASE = 2.0
#: The holder's heartbeat period (lease / 4).
HEARTBEAT = LEASE / 4
#: What each store's rule adds to the lease: the declared clock bound, and an
#: object's Last-Modified granularity.
BOUND = 0.2
EXTRA = {"postgres": 0.0, "dynamodb": BOUND, "bucket": BOUND + 1.0}
#: Room for the attempts after the refused one: statements, process starts.
SLACK = 3.0
LIMIT = 60.0
#: lockctl's exit status when the lock stayed held (docs/cli.md).
TIMED_OUT = 3


def python_attempt(spec: dict[str, object], rule_on: bool) -> bool:
    """A fresh client's one attempt; whether it took the lock."""
    sys.path.insert(0, str(WORKER.parent))
    from fence_worker import lock_store

    store = spec["store"]
    options: dict[str, object] = {"lease": LEASE}
    if store == "postgres":
        options["use_store_clock"] = rule_on
    elif rule_on:
        options["max_clock_difference"] = BOUND
    client = lease_lock.LockClient(lock_store(spec), owner=f"fresh-{os.getpid()}", **options)
    try:
        lock = client.try_acquire("orders")
        if lock is None:
            return False
        lock.release()
        return True
    finally:
        client.close()


def lockctl_attempt(spec: dict[str, object], rule_on: bool) -> bool:
    """A fresh ``lockctl run --wait 0s``, given at most 1.5 s (less than the
    lease it would watch); whether it ran its command in that time.

    ``--wait 0s`` skips a live holder but takes a crashed one's lock over
    (busy unless dead): with the rule off, it watches the record for a whole
    lease first, which is what the second's limit catches."""
    if spec["store"] == "postgres":
        rule = [] if rule_on else ["--no-store-clock"]
    else:
        rule = ["--max-clock-difference", f"{int(BOUND * 1000)}ms"] if rule_on else []
    try:
        done = subprocess.run(
            [lockctl(), *lockctl_args(spec), *rule, "run", "orders", "--wait", "0s", "--lease", "2s", "--", "true"],
            env=env(),
            timeout=1.5,
            capture_output=True,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return False  # still watching (killed: it held nothing)
    if done.returncode == 0:
        return True
    assert done.returncode == TIMED_OUT, done.stderr
    return False


@pytest.mark.parametrize("store", sorted(SPECS))
@pytest.mark.parametrize("surface", ["python", "lockctl"])
def test_a_fresh_process_takes_a_killed_holders_lock_once_its_lease_has_passed(
    store: str, surface: str, tmp_path: Path
) -> None:
    spec = SPECS[store]()
    attempt = python_attempt if surface == "python" else lockctl_attempt
    ready = tmp_path / "a.ready"
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(spec), "A", str(ready), str(tmp_path / "go"), str(tmp_path / "r")],
        env=env(),
    )
    try:
        wait_for(ready, "the holder took the lock")
        time.sleep(HEARTBEAT * 2)  # a heartbeat or two
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=LIMIT)
        killed = time.monotonic()
        if surface == "python":
            assert not attempt(spec, rule_on=True), "a record younger than its lease is busy"
        # Past the last write's lease (+ the rule's bound), at the latest.
        due = killed + LEASE * 1.01 + EXTRA[store]
        time.sleep(max(0.0, due - time.monotonic()))
        assert not attempt(spec, rule_on=False), "with the rule off, a fresh process watches"
        refused = time.monotonic()
        while not attempt(spec, rule_on=True):
            assert time.monotonic() - refused < SLACK, "not taken over in time"
            time.sleep(0.05)
        taken = time.monotonic() - killed
        print(f"{store} {surface}: taken over {taken:.2f} s after the kill (lease {LEASE} s)")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for pid in descendants(holder.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
