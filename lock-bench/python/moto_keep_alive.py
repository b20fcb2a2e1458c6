"""moto's DynamoDB emulator served with HTTP/1.1 keep-alive, for benchmarks.

moto_server runs moto's WSGI application on werkzeug's development server, which
answers every request with `Connection: close`, so every client opens a new TCP
connection per request and pays for it in client CPU. This serves the same
application with waitress, which keeps connections open as DynamoDB itself does,
so client CPU per request can be compared without that cost.

    moto_keep_alive.py PORT      # listens on 127.0.0.1:PORT until killed
"""
import os
import sys

from moto.server import DomainDispatcherApplication, create_backend_app
import waitress


def main(argv):
    port = int(argv[1])
    # moto builds some URLs from this, as moto_server does.
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    waitress.serve(app, host="127.0.0.1", port=port, threads=4, _quiet=True)


if __name__ == "__main__":
    main(sys.argv)
