"""python-dynamodb-lock 0.9.1's half of ./scripts/bench-vs-python: the same
scenarios as lock-bench/src/bin/side_by_side.rs, on the library's own table
layout, against the endpoint in LOCK_DYNAMODB_ENDPOINT. Prints one JSON object.

    bench.py uncontended SECONDS
    bench.py uncontended-lease-lock SECONDS LAYOUT   # the lease_lock package (lock-python)
    bench.py uncontended-drop-in SECONDS   # lease_lock.python_dynamodb_lock, 0.9.1's API
    bench.py contended SECONDS WORKERS SECTION_MS [POLL_MS]
    bench.py report RESULTS.jsonl      # the table of both libraries and the ratios
    bench.py distance-report RESULTS.jsonl  # the uncontended cycle at each added RTT
    bench.py package-report RESULTS.jsonl   # lease_lock beside python-dynamodb-lock
    bench.py blocked-report RESULTS.jsonl   # the two waits of blocked_wait.py

Client CPU is this process's user + system time (resource.getrusage, all
threads) during the measured loop.
"""
import datetime
import json
import os
import resource
import sys
import threading
import time
import uuid

KEY = "bench-key"


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resource_():
    import boto3

    # One session per client: boto3 resources are not thread safe.
    return boto3.session.Session().resource(
        "dynamodb",
        endpoint_url=os.environ["LOCK_DYNAMODB_ENDPOINT"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
    )


def fresh_table():
    from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockClient

    name = "bench-python-%s" % uuid.uuid4().hex
    DynamoDBLockClient.create_dynamodb_table(resource_().meta.client, table_name=name)
    return name


def drop_table(name):
    resource_().meta.client.delete_table(TableName=name)


def uncontended(seconds, module="python_dynamodb_lock.python_dynamodb_lock"):
    """The uncontended cycle through python-dynamodb-lock 0.9.1's API: the library
    itself, or (``module``) lease_lock's drop-in module with the same code."""
    import importlib

    DynamoDBLockClient = importlib.import_module(module).DynamoDBLockClient
    drop_in = module.startswith("lease_lock")
    table = fresh_table()
    client = DynamoDBLockClient(
        resource_(), table_name=table, owner_name="drop-in-bench" if drop_in else "python-bench"
    )
    for _ in range(5):  # warm up: connection, first request
        client.acquire_lock(KEY).release()
    result = timed_cycles(seconds, lambda: client.acquire_lock(KEY), lambda lock: lock.release(best_effort=False))
    client.close()
    drop_table(table)
    library = "lease_lock.python_dynamodb_lock" if drop_in else "python-dynamodb-lock 0.9.1"
    return {"library": library, "layout": "python-dynamodb-lock", **result}


def timed_cycles(seconds, acquire, release):
    """Uncontended acquire + release, over and over for ``seconds``: cycles/s,
    latencies and this process's CPU per cycle (the fields both libraries'
    rows share)."""
    cpu_before = cpu()
    start = time.monotonic()
    deadline = start + seconds
    cycles = 0
    acquires, releases = [], []
    while time.monotonic() < deadline:
        started = time.monotonic()
        lock = acquire()
        acquired = time.monotonic()
        release(lock)
        acquires.append((acquired - started) * 1e3)
        releases.append((time.monotonic() - acquired) * 1e3)
        cycles += 1
    elapsed = time.monotonic() - start
    used = cpu() - cpu_before
    return {
        "scenario": "uncontended",
        "cycles": cycles,
        "seconds": elapsed,
        "per_second": cycles / elapsed,
        "cpu_s": used,
        "cpu_ms_per_op": used * 1e3 / max(cycles, 1),
        "acquire_p50_ms": quantile(acquires, 0.5),
        "acquire_p99_ms": quantile(acquires, 0.99),
        "release_p50_ms": quantile(releases, 0.5),
        "release_p99_ms": quantile(releases, 0.99),
        "added_rtt_ms": added_rtt_ms(),
    }


def uncontended_lease_lock(seconds, layout):
    """The uncontended cycle of the lease_lock package: the same loop, from Python."""
    import lease_lock

    name = "bench-package-%s" % uuid.uuid4().hex
    store = lease_lock.DynamoDBStore(
        name,
        layout=layout,
        endpoint_url=os.environ["LOCK_DYNAMODB_ENDPOINT"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
    )
    store.create_table(wait=60)
    client = lease_lock.LockClient(store, owner="package-bench")
    for _ in range(5):  # warm up: connection, first request
        client.acquire(KEY).release()
    result = timed_cycles(seconds, lambda: client.acquire(KEY), lambda lock: lock.release())
    client.close()
    store.delete_table(wait=60)
    return {"library": "lease_lock (Python package)", "layout": layout, **result}


def package_report(path):
    """lease_lock beside python-dynamodb-lock at each added round-trip time:
    cycles/s and client CPU per cycle, with the ratios."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| added RTT | library | acquire p50 | release p50 | cycles/s | CPU ms / cycle | cycles/s ratio | CPU ratio | cycles/s vs package API |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rtt in sorted({row["added_rtt_ms"] for row in rows}):
        members = [row for row in rows if row["added_rtt_ms"] == rtt]
        python = next((r for r in members if r["library"].startswith("python-dynamodb-lock")), None)
        package = next((r for r in members if r["library"].startswith("lease_lock (")
                        and r["layout"] == "python-dynamodb-lock"), None)
        for row in members:
            ours = row["library"].startswith("lease_lock")
            drop_in = row["library"] == "lease_lock.python_dynamodb_lock"
            ratio_ops = ratio_cpu = vs_package = "-"
            if ours and python:
                ratio_ops = "%.2fx" % (row["per_second"] / python["per_second"])
                ratio_cpu = "%.2fx" % (row["cpu_ms_per_op"] / python["cpu_ms_per_op"])
            if drop_in and package:
                vs_package = "%.2fx" % (row["per_second"] / package["per_second"])
            library = row["library"] if not ours or drop_in else "lease_lock (%s layout)" % row["layout"]
            print("| %g ms | %s | %.1f ms | %.1f ms | %.1f | %.2f | %s | %s | %s |" % (
                rtt, library, row["acquire_p50_ms"], row["release_p50_ms"], row["per_second"],
                row["cpu_ms_per_op"], ratio_ops, ratio_cpu, vs_package))


def blocked_report(path):
    """blocked_wait.py's two ways of waiting, side by side, with the ratios."""
    rows = {row["wait"]: row for row in (json.loads(line) for line in open(path) if line.strip())}
    print("| wait | main thread CPU while waiting | process CPU while waiting | Ctrl-C heard after: p50 | max | CPU per short call |")
    print("|---|---|---|---|---|---|")
    for name, label in (("looking", "looking every 50 ms"), ("woken", "woken by the signal")):
        row = rows[name]
        print("| %s | %.2f ms/s | %.2f ms/s | %.1f ms | %.1f ms | %.0f µs |" % (
            label, row["main_thread_cpu_ms_per_s"], row["process_cpu_ms_per_s"],
            row["interrupt_p50_ms"], row["interrupt_max_ms"], row["short_call_cpu_us"]))
    woken, looking = rows["woken"], rows["looking"]
    print("| ratio (woken / looking) | %.3fx | %.3fx | %.3fx | %.3fx | %.2fx |" % (
        woken["main_thread_cpu_ms_per_s"] / looking["main_thread_cpu_ms_per_s"],
        woken["process_cpu_ms_per_s"] / looking["process_cpu_ms_per_s"],
        woken["interrupt_p50_ms"] / looking["interrupt_p50_ms"],
        woken["interrupt_max_ms"] / looking["interrupt_max_ms"],
        woken["short_call_cpu_us"] / looking["short_call_cpu_us"]))


def quantile(values, q):
    """The q quantile (nearest rank) of values, as the Rust side computes it."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round((len(ordered) - 1) * q)))]


def added_rtt_ms():
    """The round-trip time ./scripts/bench-vs-python --distance added (a label)."""
    value = os.environ.get("BENCH_ADDED_RTT_MS")
    return float(value) if value else None


def contended(seconds, workers, section_ms, poll_ms):
    from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockClient, DynamoDBLockError

    table = fresh_table()
    clients = []
    for i in range(workers):
        client = DynamoDBLockClient(resource_(), table_name=table, owner_name="python-worker-%d" % (i + 1))
        client.acquire_lock(KEY).release()
        clients.append(client)
    state = {
        "last_holder": 0,
        "in_section": False,
        "violations": 0,
        "sections": 0,
        "release_started": None,
        "handoffs": [],
    }
    changed = threading.Condition()
    errors = []
    cpu_before = cpu()
    start = time.monotonic()
    deadline = start + seconds

    def worker(wid, client):
        first = True
        try:
            while True:
                with changed:
                    while not first and state["last_holder"] == wid:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return
                        changed.wait(remaining)
                first = False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                kwargs = {"retry_timeout": datetime.timedelta(seconds=remaining)}
                if poll_ms is not None:
                    kwargs["retry_period"] = datetime.timedelta(milliseconds=poll_ms)
                try:
                    lock = client.acquire_lock(KEY, **kwargs)
                except DynamoDBLockError as error:
                    if error.code == DynamoDBLockError.ACQUIRE_TIMEOUT:
                        return
                    raise
                with changed:
                    if state["in_section"]:
                        state["violations"] += 1
                    state["in_section"] = True
                    now = time.monotonic()
                    released = state["release_started"]
                    if released is not None and now > released and now < deadline:
                        state["handoffs"].append((now - released) * 1e3)
                    state["last_holder"] = wid
                    changed.notify_all()
                time.sleep(section_ms / 1e3)
                with changed:
                    if time.monotonic() < deadline:
                        state["sections"] += 1
                    state["in_section"] = False
                    state["release_started"] = time.monotonic()
                lock.release(best_effort=False)
        except Exception as error:  # reported by the main thread
            errors.append(repr(error))

    threads = [threading.Thread(target=worker, args=(i + 1, c)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    used = cpu() - cpu_before
    for client in clients:
        client.close()
    drop_table(table)
    if errors:
        raise RuntimeError("worker failed: %s" % errors)
    handoffs = sorted(state["handoffs"])
    sections = state["sections"]
    return {
        "library": "python-dynamodb-lock 0.9.1",
        "scenario": "contended",
        "workers": workers,
        "poll_ms": poll_ms,
        "section_ms": section_ms,
        "sections": sections,
        "seconds": seconds,
        "per_second": sections / seconds,
        "handoffs": len(handoffs),
        "handoff_mean_ms": sum(handoffs) / max(len(handoffs), 1),
        "handoff_median_ms": handoffs[len(handoffs) // 2] if handoffs else None,
        "violations": state["violations"],
        "cpu_s": used,
        "cpu_ms_per_op": used * 1e3 / max(sections, 1),
    }


def report(path):
    """Pairs each Rust result with the Python result of the same scenario."""
    rows = [json.loads(line) for line in open(path) if line.strip()]

    def label(row):
        if row["scenario"] == "uncontended":
            return "uncontended acquire + release"
        poll = "default poll periods" if row["poll_ms"] is None else "both polling every %g ms" % row["poll_ms"]
        return "hand-off, %d workers on one key, %g ms sections, %s" % (row["workers"], row["section_ms"], poll)

    def fmt(x, digits=1):
        return "-" if x is None else ("%.*f" % (digits, x))

    groups = {}
    for row in rows:
        groups.setdefault((row.get("pair"), label(row)), []).append(row)
    print("| scenario | library | ops/s | client CPU per op | hand-off mean / median | ops/s ratio | CPU per op ratio | hand-off speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for (_, name), members in groups.items():
        python = next((r for r in members if r["library"].startswith("python")), None)
        for row in members:
            rust = not row["library"].startswith("python")
            ratio_ops = ratio_cpu = speedup = "-"
            if rust and python:
                ratio_ops = "%.2fx" % (row["per_second"] / python["per_second"]) if python["per_second"] else "inf"
                ratio_cpu = "1/%.1f" % (python["cpu_ms_per_op"] / row["cpu_ms_per_op"]) if row["cpu_ms_per_op"] else "-"
                if row["scenario"] == "contended" and row["handoff_mean_ms"] and python["handoffs"]:
                    speedup = "%.2fx" % (python["handoff_mean_ms"] / row["handoff_mean_ms"])
            library = row["library"]
            if row["scenario"] == "uncontended":
                library += " (%s layout)" % row["layout"]
            handoff = "-"
            if row["scenario"] == "contended":
                handoff = "%s / %s ms (%d)" % (fmt(row["handoff_mean_ms"]), fmt(row["handoff_median_ms"]), row["handoffs"])
                if row["violations"]:
                    handoff += " EXCLUSION VIOLATED %d times" % row["violations"]
            print("| %s | %s | %s | %s ms | %s | %s | %s | %s |" % (
                name, library, fmt(row["per_second"]), fmt(row["cpu_ms_per_op"], 2), handoff, ratio_ops, ratio_cpu, speedup))


def distance_report(path):
    """The uncontended cycle at each added round-trip time: latencies, cycles/s
    and the ratios of this project over python-dynamodb-lock."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| added RTT | library | acquire p50 / p99 | release p50 / p99 | cycles/s | acquire p50 ratio | cycles/s ratio |")
    print("|---|---|---|---|---|---|---|")
    for rtt in sorted({row["added_rtt_ms"] for row in rows}):
        members = [row for row in rows if row["added_rtt_ms"] == rtt]
        python = next((r for r in members if r["library"].startswith("python")), None)
        for row in members:
            rust = not row["library"].startswith("python")
            ratio_latency = ratio_ops = "-"
            if rust and python:
                ratio_latency = "%.2fx" % (row["acquire_p50_ms"] / python["acquire_p50_ms"])
                ratio_ops = "%.2fx" % (row["per_second"] / python["per_second"])
            library = row["library"] + (" (%s layout)" % row["layout"] if rust else "")
            print("| %g ms | %s | %.1f / %.1f ms | %.1f / %.1f ms | %.1f | %s | %s |" % (
                rtt, library, row["acquire_p50_ms"], row["acquire_p99_ms"],
                row["release_p50_ms"], row["release_p99_ms"], row["per_second"], ratio_latency, ratio_ops))


def main(argv):
    mode = argv[1]
    if mode == "report":
        report(argv[2])
        return
    if mode == "distance-report":
        distance_report(argv[2])
        return
    if mode == "package-report":
        package_report(argv[2])
        return
    if mode == "blocked-report":
        blocked_report(argv[2])
        return
    seconds = float(argv[2])
    if mode == "uncontended":
        result = uncontended(seconds)
    elif mode == "uncontended-lease-lock":
        result = uncontended_lease_lock(seconds, argv[3])
    elif mode == "uncontended-drop-in":
        result = uncontended(seconds, "lease_lock.python_dynamodb_lock")
    elif mode == "contended":
        poll = float(argv[5]) if len(argv) > 5 else None
        result = contended(seconds, int(argv[3]), float(argv[4]), poll)
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
