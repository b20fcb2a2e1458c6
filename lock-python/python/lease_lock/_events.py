"""The package's Python thread: on_unsafe callbacks and Rust log records, and the clean-up at exit.

The lock runtime's threads never run Python code (a runtime thread waiting
for the GIL would be a heartbeat not sent): they queue callbacks and log
records, and one daemon thread, started with the first client, takes them
off the queue and runs them. At interpreter exit every open client is
closed (its locks released, within its shutdown timeout) before that thread
stops. After ``os.fork()`` the child starts a thread of its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Any, Protocol

from . import _native

logger = logging.getLogger("lease_lock")


class _Closable(Protocol):
    def _close_at_exit(self) -> None: ...


_lock = threading.Lock()
_thread: threading.Thread | None = None
_stop = threading.Event()
_clients: weakref.WeakSet[Any] = weakref.WeakSet()


def _dispatch(events: list[tuple[Any, ...]]) -> None:
    for event in events:
        if event[0] == "lost":
            _, callback, reason = event
            try:
                callback(reason)
            except Exception:
                logger.exception("an on_unsafe callback raised (lock no longer safe: %s)", reason)
        else:
            _, level, name, message = event
            logging.getLogger(name).log(level, "%s", message)


def _run() -> None:
    # Woken by events, or by _at_exit through wake_events; the timeout only
    # bounds a missed wake-up.
    while not _stop.is_set():
        _dispatch(_native.next_events(5.0))
    # What the runtime queued while the clients closed.
    _dispatch(_native.next_events(0.0))


def start() -> None:
    """Start the callback thread if it is not running, and forward log records at the ``lease_lock`` logger's level."""
    global _thread
    _native.set_log_level(logger.getEffectiveLevel())
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _stop.clear()
        _thread = threading.Thread(target=_run, name="lease_lock-callbacks", daemon=True)
        _thread.start()


def register(client: _Closable) -> None:
    """Close ``client`` at interpreter exit if it is still open then."""
    _clients.add(client)


def _at_exit() -> None:
    global _thread
    for client in list(_clients):
        try:
            client._close_at_exit()
        except Exception:
            logger.exception("closing a lock client at exit failed")
    _stop.set()
    _native.wake_events()
    thread = _thread
    if thread is not None:
        thread.join(timeout=2.0)
    _thread = None


def _after_fork_in_child() -> None:
    global _thread, _lock
    # The parent's thread and clients do not exist here.
    _native.after_fork_in_child()
    _thread = None
    _lock = threading.Lock()
    _clients.clear()


atexit.register(_at_exit)
# POSIX only: Windows has no fork() (and no os.register_at_fork); there the
# package needs no fork handling at all.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
