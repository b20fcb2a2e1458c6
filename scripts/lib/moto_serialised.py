"""moto's DynamoDB emulator, serving one request at a time.

moto's own server (moto_server) runs each request on its own thread, and nothing
in moto serialises them: `UpdateItem` reads the item, checks its condition, then
creates the item holding only its key and fills it in, in separate steps. Two
concurrent conditional creates of one key can then both succeed, and a reader can
see the item with nothing but its key. DynamoDB applies every write atomically,
and the lock protocol relies on that, so tests run against moto_server could fail
(or pass) for reasons that have nothing to do with the code under test. Here
moto's WSGI application is wrapped so that every request holds one process-wide
lock from the moment the application is called until its response body has been
read to the end and closed (the body may do work lazily); docs/testing.md has the
measurements. The request body is read under the lock too, so a client that
stops half-way through sending one holds up every other until it disconnects. A
request that holds the lock for over a second is logged, since every other
request waited for it.

    moto_serialised.py PORT [threaded|keep-alive]

threaded (the default, for the tests): werkzeug's threaded development server
with moto's request handler, as moto_server runs it; it closes every connection
after one request.

keep-alive (benchmarks): waitress, which keeps HTTP/1.1 connections open as
DynamoDB does, so that client CPU per request can be measured without a TCP
connection set up and torn down for every request. Needs waitress installed.

Listens on 127.0.0.1:PORT until killed. moto's /moto-api/ answers as usual.
"""
import argparse
import os
import signal
import sys
import threading
import time

from moto.server import DomainDispatcherApplication, create_backend_app

# A request that holds the lock longer than this is logged.
SLOW_SECONDS = 1.0


class Serialised:
    """WSGI middleware: one request at a time, body included."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            started = time.monotonic()
            body = self.app(environ, start_response)
            try:
                # Read the whole body under the lock: an iterable may compute its
                # chunks (or finish the request in close()) only when asked.
                chunks = list(body)
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()
            held = time.monotonic() - started
        if held > SLOW_SECONDS:
            # Every other request waited this long: say so, for a client timeout
            # that would otherwise be a mystery.
            target = environ.get("HTTP_X_AMZ_TARGET") or environ.get("PATH_INFO", "")
            print(
                f"moto_serialised: {target} held the server for {held:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        # Sent after the lock is released, so a slow reader holds up no one.
        return chunks


def main(argv):
    parser = argparse.ArgumentParser(description="moto, one request at a time")
    parser.add_argument("port", type=int)
    parser.add_argument(
        "mode", nargs="?", default="threaded", choices=["threaded", "keep-alive"]
    )
    args = parser.parse_args(argv[1:])

    # moto builds some URLs from this, as moto_server does.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    # Exit cleanly (as moto_server does) when the scripts stop the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    app = Serialised(DomainDispatcherApplication(create_backend_app))
    if args.mode == "keep-alive":
        import logging

        import waitress

        # Requests queue for the lock, so waitress's threads being all busy is the
        # normal state here, not worth its warning on every request.
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        waitress.serve(app, host="127.0.0.1", port=args.port, threads=4, _quiet=True)
    else:
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from werkzeug.serving import run_simple

        run_simple(
            "127.0.0.1",
            args.port,
            app,
            threaded=True,
            request_handler=MotoRequestHandler,
        )


if __name__ == "__main__":
    main(sys.argv)
