"""The runtime as Python users expect it: the GIL, Ctrl-C, fork, callbacks,
logging, interpreter exit, many threads on one client, boto3 credentials."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

import lease_lock
from lease_lock import LockClient

from conftest import POSTGRES, _need, eventually, make_postgres_store

Clients = Callable[..., LockClient]


# Python installs its Ctrl-C handler (KeyboardInterrupt) only where SIGINT
# was not ignored when the interpreter started, and a process started with
# it ignored (a background job of a shell without job control, as some CI
# runners start the tests) passes that on. A script that sends itself SIGINT
# puts the handler a terminal's Python has in place first.
CTRL_C_HANDLER = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def run_script(
    source: str, timeout: float = 60, ctrl_c: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` in a fresh interpreter; fail if it has not exited within ``timeout``.

    With ``ctrl_c``, SIGINT raises ``KeyboardInterrupt`` in it, as at a
    terminal, whatever the test process inherited.
    """
    script = textwrap.dedent(source)
    if ctrl_c:
        script = CTRL_C_HANDLER + script
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def test_a_lock_is_kept_while_python_holds_the_gil_for_three_leases() -> None:
    store = lease_lock.MemoryStore()
    alice = LockClient(store, owner="alice", lease=2, heartbeat=0.25)
    bob = LockClient(store, owner="bob")
    lock = alice.acquire("busy")
    interval = sys.getswitchinterval()
    # No other Python thread runs while this one loops: only threads that do
    # not need the GIL (the runtime's) can heartbeat.
    sys.setswitchinterval(10.0)
    try:
        deadline = time.monotonic() + 3 * 2 + 0.2  # three leases
        spins = 0
        while time.monotonic() < deadline:
            spins += 1
    finally:
        sys.setswitchinterval(interval)
    assert spins > 0
    assert lock.is_safe and lock.lost_reason is None, lock.lost_reason
    assert bob.try_acquire("busy") is None
    info = bob.get_lock("busy")
    assert info is not None and info.owner == "alice" and info.fence == 1
    lock.release()
    alice.close()
    bob.close()


def test_ctrl_c_interrupts_a_blocking_acquire_promptly_and_leaves_nothing_held() -> None:
    done = run_script(
        """
        import json, os, signal, threading, time
        import lease_lock
        store = lease_lock.MemoryStore()
        alice = lease_lock.LockClient(store, owner="alice")
        bob = lease_lock.LockClient(store, owner="bob", refresh=0.05)
        held = alice.acquire("k")
        sent = []
        def interrupt():
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        threading.Timer(0.5, interrupt).start()
        try:
            bob.acquire("k", wait=float("inf"))
            result = {"interrupted": False}
        except KeyboardInterrupt:
            latency = time.monotonic() - sent[0]
            held.release()
            time.sleep(0.3)
            info = alice.get_lock("k")
            result = {"interrupted": True, "latency": latency, "bob_holds": bob.held_keys(),
                      "released": info.released, "owner": info.owner}
        print(json.dumps(result))
        """,
        ctrl_c=True,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["interrupted"]
    assert result["latency"] < 0.1, result
    assert result == {**result, "bob_holds": [], "released": True, "owner": "alice"}


def test_after_fork_the_child_gets_a_clear_error_and_the_parent_keeps_its_locks() -> None:
    done = run_script(
        """
        import os, sys, time
        import lease_lock
        store = lease_lock.MemoryStore()
        client = lease_lock.LockClient(store, owner="parent", lease=1, heartbeat=0.2)
        lock = client.acquire("k")
        pid = os.fork()
        if pid == 0:
            failures = []
            for call in (lambda: client.acquire("other"), lock.release, lambda: lock.set_data(b"x")):
                try:
                    call()
                    failures.append("no error")
                except lease_lock.ForkedError as error:
                    if "fork" not in str(error):
                        failures.append(str(error))
            own = lease_lock.LockClient(lease_lock.MemoryStore(), owner="child")
            with own.lock("k", wait=0) as mine:
                if mine.fence != 1:
                    failures.append("fence")
            async_ok = []
            import asyncio
            async def go():
                got = await own.acquire_async("a")
                await got.release_async()
                async_ok.append(True)
            asyncio.run(go())
            if async_ok != [True]:
                failures.append("asyncio")
            print("child:", failures, flush=True)
            sys.exit(1 if failures else 0)  # atexit runs, with the parent's client inherited
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                print("child hung"); sys.exit(2)
            time.sleep(0.05)
        time.sleep(1.5)  # more than a lease: the parent's heartbeats go on
        ok = os.waitstatus_to_exitcode(status) == 0 and lock.is_safe and lock.held
        lock.release()
        print("parent:", ok)
        sys.exit(0 if ok else 3)
        """
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "child: []" in done.stdout and "parent: True" in done.stdout


def test_on_unsafe_runs_on_a_python_thread_and_its_exceptions_are_logged(
    clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    alice = clients("alice", lease=5, heartbeat=0.1)
    ops = clients("ops")
    seen: list[tuple[str, str]] = []

    def on_lost(reason: lease_lock.LostReason) -> None:
        seen.append((threading.current_thread().name, reason.kind))
        raise RuntimeError("callback failed")

    lock = alice.acquire("job", on_unsafe=on_lost)
    calm = alice.acquire("calm", on_unsafe=on_lost)
    calm.release()  # a release is not a loss: no callback
    with caplog.at_level(logging.ERROR, logger="lease_lock"):
        ops.force_release("job")
        eventually(lambda: bool(seen), what="the on_unsafe callback")
        eventually(lambda: any("on_unsafe callback raised" in r.message for r in caplog.records), what="the log record")
    assert seen == [("lease_lock-callbacks", "stolen")]
    assert lock.state is lease_lock.LeaseState.LOST


def test_rust_events_reach_the_logging_module(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lease_lock"):
        client = LockClient(lease_lock.MemoryStore(), owner="logged")  # reads the level
        client.acquire("k").release()
        eventually(
            lambda: any(r.name == "lease_lock.lock_core.acquire" and "acquired" in r.message for r in caplog.records),
            what="the 'acquired' record",
        )
        client.close()
    # Clients made later forward at the level then in force again.
    LockClient(lease_lock.MemoryStore()).close()


@pytest.mark.parametrize("holding", [True, False])
def test_the_interpreter_exits_promptly_and_releases_what_it_held(holding: bool) -> None:
    url = _need(POSTGRES, "LOCK_POSTGRES_URL")
    store = make_postgres_store()
    started = time.monotonic()
    done = run_script(
        f"""
        import lease_lock
        store = lease_lock.PostgresStore({url!r}, table={store.table!r})
        client = lease_lock.LockClient(store, owner="leaving", lease=60)
        if {holding!r}:
            kept = client.acquire("k")
            forgotten = client.acquire("j")
            del forgotten  # released in the background
        print("ready", flush=True)
        """,
        timeout=30,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 10, elapsed
    checker = LockClient(store, owner="checker")
    for key in ("k", "j"):
        info = checker.get_lock(key)
        assert info is None if not holding else (info is not None and info.released), info
    if holding:
        left = checker.get_lock("k")
        assert left is not None and left.fence >= 1
        assert checker.acquire("k", wait=0).fence == left.fence + 1
    checker.close()


def test_sixteen_threads_on_one_client_never_hold_together_and_are_served_in_order() -> None:
    client = LockClient(lease_lock.MemoryStore(), owner="shared")
    first = client.acquire("one")
    inside = 0
    most_inside = 0
    order: list[int] = []
    guard = threading.Lock()

    def worker(number: int) -> None:
        nonlocal inside, most_inside
        with client.lock("one", wait=60):
            with guard:
                inside += 1
                most_inside = max(most_inside, inside)
                order.append(number)
            time.sleep(0.005)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(16)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)  # queued before the next one arrives
    first.release()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert most_inside == 1
    assert order == list(range(16))
    client.close()


def test_boto3_session_credentials_are_asked_for_again_not_copied_once() -> None:
    boto3 = pytest.importorskip("boto3")
    from botocore.credentials import RefreshableCredentials
    from botocore.session import Session as BotocoreSession

    endpoint = _need(os.environ.get("LOCK_DYNAMODB_AUTH_ENDPOINT"), "LOCK_DYNAMODB_AUTH_ENDPOINT")
    keys = {"current": (os.environ["LOCK_AUTH_GOOD_KEY"], os.environ["LOCK_AUTH_GOOD_SECRET"])}
    refreshes = []

    def refresh() -> dict[str, Any]:
        refreshes.append(time.monotonic())
        access, secret = keys["current"]
        # Expiring soon: botocore refreshes on every use, as it does for
        # temporary credentials in their last minutes.
        expiry = datetime.now(timezone.utc) + timedelta(seconds=2)
        return {"access_key": access, "secret_key": secret, "token": None, "expiry_time": expiry.isoformat()}

    botocore_session = BotocoreSession()
    botocore_session._credentials = RefreshableCredentials.create_from_metadata(
        metadata=refresh(), refresh_using=refresh, method="test"
    )
    session = boto3.Session(botocore_session=botocore_session, region_name="us-east-1")
    import uuid

    store = lease_lock.DynamoDBStore(f"py-auth-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint, session=session)
    store.create_table(wait=60)
    client = LockClient(store, owner="session")
    client.acquire("k").release()
    time.sleep(2.1)
    client.acquire("k").release()
    assert len(refreshes) >= 3, refreshes
    # A key that may not write: the next request is signed with it.
    keys["current"] = (os.environ["LOCK_AUTH_DENIED_KEY"], os.environ["LOCK_AUTH_DENIED_SECRET"])
    time.sleep(2.1)
    with pytest.raises(lease_lock.StoreError) as raised:
        client.acquire("k", wait=0)
    assert raised.value.kind == "unauthorized" and not raised.value.retryable
    client.close()


def test_dropping_the_last_handle_never_blocks_the_python_thread() -> None:
    import gc

    store = lease_lock.MemoryStore()
    client = LockClient(store, owner="dropped", shutdown_timeout=3)
    lock = client.acquire("k")
    store.set_unavailable(True)  # the release will retry until the shutdown timeout
    started = time.monotonic()
    del lock, client
    gc.collect()
    # The wait for the background release happens on the runtime, not here.
    assert time.monotonic() - started < 1.0
    store.set_unavailable(False)


def test_a_cancelled_close_still_releases_what_it_started() -> None:
    import asyncio

    store = lease_lock.MemoryStore()
    client = LockClient(store, owner="closing", shutdown_timeout=10)
    checker = LockClient(store, owner="checker")

    kept: list[lease_lock.Lock] = []  # alive throughout: only the close releases them

    async def main() -> None:
        kept.append(await client.acquire_async("k"))
        kept.append(await client.acquire_async("j"))
        store.set_unavailable(True)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.close_async(), timeout=0.2)
        store.set_unavailable(False)

    asyncio.run(main())
    eventually(
        lambda: all((info := checker.get_lock(key)) is not None and info.released for key in ("k", "j")),
        what="both releases, though the close was cancelled",
    )
    assert len(kept) == 2
    checker.close()


def test_ctrl_c_during_wait_unsafe_release_and_close_stops_the_wait_not_the_release() -> None:
    """Ctrl-C ends a blocking call promptly; a release or close it interrupted still finishes."""
    done = run_script(
        """
        import json, os, signal, threading, time
        import lease_lock
        store = lease_lock.MemoryStore()
        alice = lease_lock.LockClient(store, owner="alice")
        result = {}

        def interrupted(call, outage=False):
            # SIGINT 0.3 s into `call`; with `outage`, the store is down until 0.6 s.
            if outage:
                store.set_unavailable(True)
                threading.Timer(0.6, store.set_unavailable, (False,)).start()
            sent = []
            def interrupt():
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)
            threading.Timer(0.3, interrupt).start()
            try:
                call()
                return None
            except KeyboardInterrupt:
                return time.monotonic() - sent[0]

        lock = alice.acquire("wait")
        result["wait_unsafe"] = interrupted(lambda: lock.wait_unsafe())
        result["still_safe"] = lock.is_safe
        lock.release()

        lock = alice.acquire("release")
        result["release"] = interrupted(lock.release, outage=True)
        time.sleep(2)
        result["released"] = alice.get_lock("release").released

        held = alice.acquire("close")
        result["close"] = interrupted(alice.close, outage=True)
        time.sleep(2)
        checker = lease_lock.LockClient(store, owner="checker")
        result["closed_released"] = checker.get_lock("close").released
        checker.close()
        print(json.dumps(result))
        """,
        ctrl_c=True,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for call in ("wait_unsafe", "release"):
        assert result[call] is not None and result[call] < 0.2, result
    assert result["still_safe"] and result["released"], result
    # A close is not stopped by Ctrl-C at all (or stops only its wait): either
    # way, what it started is released.
    assert result["close"] is None or result["close"] < 0.2, result
    assert result["closed_released"], result


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_blocking_wait_keeps_the_programs_signal_handlers_and_wakeup_socket() -> None:
    """The main thread's blocking wait is woken by Python's signal wake-up
    socket: the program's own wake-up socket, its handlers (also one that
    makes a blocking call itself) and an asyncio loop's signal handlers all
    see every signal that arrived during the wait."""
    done = run_script(
        """
        import asyncio, json, os, signal, socket, threading
        import lease_lock
        client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="alice")
        lock = client.acquire("wait")
        result = {}

        def signal_during(seconds, signum):
            threading.Timer(seconds, os.kill, (os.getpid(), signum)).start()

        # No wake-up socket before: none after.
        lock.wait_unsafe(timeout=0.05)
        result["none_after"] = signal.set_wakeup_fd(-1)

        # The program's own socket: put back, with the signal written to it.
        mine, theirs = socket.socketpair()
        theirs.setblocking(False)
        mine.settimeout(2)
        signal.set_wakeup_fd(theirs.fileno())
        handled = []
        signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
        signal_during(0.2, signal.SIGUSR1)
        result["wait_1"] = lock.wait_unsafe(timeout=0.6)
        result["handled"] = list(handled)
        result["kept"] = signal.set_wakeup_fd(-1) == theirs.fileno()
        result["written"] = list(mine.recv(16))

        # A handler that blocks in a call of its own, during a wait.
        def nested(signum, frame):
            other = client.try_acquire("other")
            handled.append(other is not None and other.fence)
            other.release()
        signal.signal(signal.SIGUSR2, nested)
        signal_during(0.2, signal.SIGUSR2)
        result["wait_2"] = lock.wait_unsafe(timeout=0.6)
        result["nested"] = handled[1:]

        # An asyncio loop's handler, the loop blocked by a call meanwhile.
        async def main():
            seen = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, seen.set)
            signal_during(0.2, signal.SIGUSR1)
            lock.wait_unsafe(timeout=0.6)
            await asyncio.wait_for(seen.wait(), 5)
            return True
        result["asyncio"] = asyncio.run(main())
        lock.release()
        client.close()
        print(json.dumps(result))
        """
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {
        "none_after": -1,
        "wait_1": None,
        "handled": [int(signal.SIGUSR1)],
        "kept": True,
        "written": [int(signal.SIGUSR1)],
        "wait_2": None,
        "nested": [1],
        "asyncio": True,
    }, result


def test_a_call_that_panics_on_the_runtime_raises_at_once_on_any_thread() -> None:
    # A bug that panics a call's task must wake the caller with an error: on
    # the main thread, whose wait is woken through a socket, as on any other.
    result = run_script(
        """
        import threading, time
        from lease_lock import _native

        def call(where):
            started = time.monotonic()
            try:
                _native._panicking_call()
            except RuntimeError as error:
                print(where, "raised after", f"{time.monotonic() - started:.3f}", "s:", error)

        call("main")
        thread = threading.Thread(target=call, args=("thread",))
        thread.start()
        thread.join()
        """,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    # At once, not after a wait that never ends (the 30 s timeout): a bound
    # far above a call's time on a loaded machine, far below any timeout.
    for where in ("main", "thread"):
        line = next((line for line in result.stdout.splitlines() if line.startswith(f"{where} raised after")), None)
        assert line is not None, (result.stdout, result.stderr)
        assert "s: the lock runtime dropped a call" in line, line
        assert float(line.split()[3]) < 5, line


def test_a_lock_dropped_without_release_is_released_not_left_for_its_lease() -> None:
    import gc

    store = lease_lock.MemoryStore()
    alice = LockClient(store, owner="alice", lease=60)
    lock = alice.acquire("dropped")
    del lock
    gc.collect()
    eventually(lambda: (info := alice.get_lock("dropped")) is not None and info.released, what="the release")
    bob = LockClient(store, owner="bob")
    assert bob.try_acquire("dropped") is not None
    alice.close()
    bob.close()


def test_many_threads_of_several_clients_never_hold_one_lock_together() -> None:
    store = lease_lock.MemoryStore()
    clients = [LockClient(store, owner=f"c{i}", refresh=0.01) for i in range(3)]
    inside = 0
    most = 0
    fences: list[int] = []
    guard = threading.Lock()

    def worker(client: LockClient) -> None:
        nonlocal inside, most
        for _ in range(5):
            with client.lock("shared", wait=30) as lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                    fences.append(lock.fence)
                assert lock.is_safe
                time.sleep(0.002)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=worker, args=(clients[i % 3],)) for i in range(9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert most == 1
    assert len(fences) == 45 and fences == sorted(fences) and len(set(fences)) == 45
    for client in clients:
        client.close()
