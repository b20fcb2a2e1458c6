"""A Python main thread blocked in a lease_lock call: what the wait costs and
how soon Ctrl-C is heard. Part of ./scripts/bench-python-package; prints one
JSON object per way of waiting.

    blocked_wait.py SECONDS

Both ways the package waits on the main thread, side by side:

* woken: the wait reads Python's signal wake-up socket, so a signal wakes it
  at once (the package's wait on POSIX systems);
* looking: the wait wakes every 50 ms to ask Python for signals (the
  package's wait on Windows, and for a call made inside a signal handler
  while another wait is under way: here it is measured that way, inside a
  SIGUSR1 handler that interrupts an outer wait).

For each: the main thread waits in ``Lock.wait_unsafe()`` for SECONDS on a
MemoryStore lock with a 10-minute lease (so no heartbeat falls inside), and
the figures are the main thread's CPU (``time.thread_time``) and the whole
process's (every thread) per second of waiting; then, 30 times, another
thread sends SIGINT to the main thread while it waits, at a moment out of
step with any periodic wake-up, and the figure is the time from the signal
to the ``KeyboardInterrupt``; last, the process CPU per short blocking call
(``LockClient.get_lock`` on a MemoryStore, 5,000 times), which is what
setting up each way of waiting costs a call that does not wait.
"""
import json
import random
import resource
import signal
import statistics
import sys
import threading
import time

import lease_lock


def process_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def woken(call):
    return call()


def looking(call):
    """``call()`` inside a SIGUSR1 handler that interrupts an outer wait."""
    outcome = {}

    def handler(signum, frame):
        try:
            outcome["value"] = call()
        except KeyboardInterrupt:
            outcome["interrupted"] = True
        raise StopIteration  # ends the outer wait

    outer = lease_lock.LockClient(lease_lock.MemoryStore(), lease=600)
    outer_lock = outer.acquire("outer")
    previous = signal.signal(signal.SIGUSR1, handler)
    main = threading.get_ident()
    threading.Timer(0.01, signal.pthread_kill, (main, signal.SIGUSR1)).start()
    try:
        outer_lock.wait_unsafe(timeout=60)
    except StopIteration:
        pass
    finally:
        signal.signal(signal.SIGUSR1, previous)
        outer.close()
    if outcome.get("interrupted"):
        raise KeyboardInterrupt
    return outcome.get("value")


def idle(lock, seconds, way):
    def measured():
        thread_before, process_before = time.thread_time(), process_cpu()
        started = time.monotonic()
        lock.wait_unsafe(timeout=seconds)
        waited = time.monotonic() - started
        return {
            "main_thread_cpu_ms_per_s": (time.thread_time() - thread_before) * 1000 / waited,
            "process_cpu_ms_per_s": (process_cpu() - process_before) * 1000 / waited,
        }

    return way(measured)


def interrupt(lock, way, rounds=30):
    main = threading.get_ident()
    latencies = []
    for _ in range(rounds):
        sent = []

        def send():
            # A delay out of step with any periodic wake-up of the wait.
            time.sleep(0.2 + random.uniform(0, 0.1))
            sent.append(time.monotonic())
            signal.pthread_kill(main, signal.SIGINT)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            way(lambda: lock.wait_unsafe(timeout=10))
        except KeyboardInterrupt:
            latencies.append(time.monotonic() - sent[0])
        sender.join()
    latencies.sort()
    return {
        "interrupt_p50_ms": statistics.median(latencies) * 1000,
        "interrupt_max_ms": latencies[-1] * 1000,
        "interrupts": len(latencies),
    }


def short_calls(client, way, calls=5000):
    def measured():
        for _ in range(200):  # warm up
            client.get_lock("blocked-wait")
        before = process_cpu()
        for _ in range(calls):
            client.get_lock("blocked-wait")
        return (process_cpu() - before) * 1e6 / calls

    return {"short_call_cpu_us": way(measured)}


def main(argv):
    seconds = float(argv[1])
    client = lease_lock.LockClient(lease_lock.MemoryStore(), lease=600)
    lock = client.acquire("blocked-wait")
    for name, way in (("woken", woken), ("looking", looking)):
        result = {"wait": name, "seconds": seconds, **idle(lock, seconds, way), **interrupt(lock, way),
                  **short_calls(client, way)}
        print(json.dumps(result), flush=True)
    lock.release()
    client.close()


if __name__ == "__main__":
    main(sys.argv)
