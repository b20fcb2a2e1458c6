"""A forward HTTP proxy in front of the DynamoDB emulator that can refuse one operation.

Used as a client's ``endpoint_url``: every request goes to the upstream endpoint as it
came (method, path, headers, body) and its answer comes back as the upstream gave it.
``block("UpdateItem")`` makes the proxy answer every ``UpdateItem`` request (told apart by
its ``X-Amz-Target: DynamoDB_20120810.UpdateItem`` header) at once with a throttling
error instead, until ``unblock()``.

Blocked requests are answered rather than held: python-dynamodb-lock 0.9.1 sends a heartbeat
while holding the lock's ``thread_lock``, which its heartbeat checker also takes, so a request
that hangs would stop the checker as well and no danger would ever be reported.

Standard library only. The client's Host header is forwarded unchanged: the emulator does not
check signatures, so requests signed for the proxy's address are accepted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

TARGET_PREFIX = "DynamoDB_20120810."
BLOCKED_BODY = json.dumps(
    {
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": "blocked by the test proxy",
    }
).encode()

# Headers that describe one hop (RFC 9110, section 7.6.1) and are not passed on. The body is
# always re-sent with a Content-Length of its own, so the framing headers go too.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


class BlockingProxy:
    """The proxy: ``start()`` it, point clients at ``url``, ``stop()`` it (or use ``with``)."""

    def __init__(self, upstream: str, timeout: float = 30.0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the upstream must be an http:// URL, not {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self.timeout = timeout
        self._guard = threading.Lock()
        self._blocked_targets: set[str] = set()
        self._forwarded: Counter[str] = Counter()
        self._blocked: Counter[str] = Counter()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle -------------------------------------------------------------------------

    def start(self) -> BlockingProxy:
        if self._server is not None:
            raise RuntimeError("the proxy is already started")
        server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        # Keep-alive connections leave handler threads waiting for the next request; shutting
        # their sockets down ends those threads now rather than when the client goes away.
        with self._guard:
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> BlockingProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- the switch and the counts ----------------------------------------------------------

    def block(self, target: str) -> None:
        """Refuse the DynamoDB operation ``target`` (e.g. ``"UpdateItem"``) until unblocked."""
        with self._guard:
            self._blocked_targets.add(target)

    def unblock(self, target: str | None = None) -> None:
        """Let ``target`` through again; every operation when ``target`` is None."""
        with self._guard:
            if target is None:
                self._blocked_targets.clear()
            else:
                self._blocked_targets.discard(target)

    def blocked_count(self, target: str | None = None) -> int:
        """How many requests were refused: of ``target``, or of every operation."""
        with self._guard:
            return self._blocked[target] if target else sum(self._blocked.values())

    def forwarded_count(self, target: str | None = None) -> int:
        """How many requests went upstream: of ``target``, or of every operation."""
        with self._guard:
            return self._forwarded[target] if target else sum(self._forwarded.values())

    # --- used by the handler ----------------------------------------------------------------

    def _should_block(self, target: str) -> bool:
        with self._guard:
            if target in self._blocked_targets:
                self._blocked[target] += 1
                return True
            self._forwarded[target] += 1
            return False

    def _track(self, sock: socket.socket, open_: bool) -> None:
        with self._guard:
            if open_:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)


def _make_handler(proxy: BlockingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so that the SDKs' keep-alive connections stay open across requests; every
        # answer therefore carries a Content-Length.
        protocol_version = "HTTP/1.1"
        upstream: http.client.HTTPConnection | None = None

        def setup(self) -> None:
            super().setup()
            proxy._track(self.connection, True)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                proxy._track(self.connection, False)
                if self.upstream is not None:
                    self.upstream.close()

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: pytest shows stderr of failing tests

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        # trailer section, up to the empty line
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()  # the CRLF after the chunk
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response_only(status)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or self.command in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            # One upstream connection per client connection; a stale one (the upstream closed
            # it while idle) is replaced once.
            for attempt in (1, 2):
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection(
                        proxy.upstream_host, proxy.upstream_port, timeout=proxy.timeout
                    )
                try:
                    self.upstream.request(self.command, self.path, body=body, headers=headers)
                    response = self.upstream.getresponse()
                    data = response.read()
                    return response.status, response.getheaders(), data
                except (http.client.HTTPException, OSError):
                    self.upstream.close()
                    self.upstream = None
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def _handle(self) -> None:
            body = self._read_body()  # read even when refused: the connection stays in step
            target = self.headers.get("X-Amz-Target", "").removeprefix(TARGET_PREFIX)
            if proxy._should_block(target):
                headers = [
                    ("Content-Type", "application/x-amz-json-1.0"),
                    ("x-amzn-RequestId", uuid.uuid4().hex),
                ]
                self._reply(400, headers, BLOCKED_BODY)
                return
            try:
                status, headers, data = self._forward(body)
            except (http.client.HTTPException, OSError) as error:
                message = f"test proxy: upstream failed: {error}".encode()
                self._reply(502, [("Content-Type", "text/plain")], message)
                self.close_connection = True
                return
            self._reply(status, headers, data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle

    return Handler
