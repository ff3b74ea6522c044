"""``headway up``'s control endpoint: ``POST /wake {"pool": NAME}``, on 127.0.0.1 only.

The supervisor serves it on an ephemeral port (``http.server`` in a thread of its own)
and hands its URL to the gateways as ``gateway.wake_url``: a gateway holding requests
for a cold pool tells it so. A wake only queues the pool's name; the supervisor's own
loop, the one owner of its children, takes it (``next_wake``) and starts the pool's
workers. Answers: 202 ``{"pool": NAME}``; anything else is refused with the project's
JSON error body: 404 (another path, or a pool ``up`` does not run), 405 (not POST), 413
(a body over 1 KiB), 415 (not JSON), 400 (not an object), 422 (not exactly ``pool``, a
string). Anyone on this machine may wake a pool: it starts a worker ``up`` would run
anyway, nothing more.
"""

from __future__ import annotations

import http.server
import json
import logging
import queue
import threading
from collections.abc import Collection
from typing import Any

log = logging.getLogger(__name__)

PATH = "/wake"
MAX_BODY_BYTES = 1024
SHUTDOWN_POLL_S = 0.05  # how soon ``close`` is noticed


class _Refused(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class WakeEndpoint:
    def __init__(self, pools: Collection[str], host: str = "127.0.0.1") -> None:
        self.pools = frozenset(pools)
        self._wakes: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._server = http.server.ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(SHUTDOWN_POLL_S,),
            name="wake-endpoint",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{PATH}"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def next_wake(self, timeout_s: float) -> str | None:
        """The next pool woken, waiting at most ``timeout_s`` for one; None if none came."""
        try:
            return self._wakes.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def accept(self, method: str, path: str, content_type: str, body: bytes) -> str:
        """The pool a request wakes (queued), or ``_Refused`` with its reason."""
        if path != PATH:
            raise _Refused(404, "not_found", f"no route {path}; POST {PATH}")
        if method != "POST":
            raise _Refused(405, "method_not_allowed", f"{PATH} takes POST")
        if len(body) > MAX_BODY_BYTES:
            raise _Refused(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise _Refused(415, "unsupported_media_type", "the body must be application/json")
        try:
            document: Any = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Refused(400, "invalid_request", "the body is not JSON") from exc
        if not isinstance(document, dict):
            raise _Refused(400, "invalid_request", "the body must be a JSON object")
        pool = document.get("pool")
        if set(document) != {"pool"} or not isinstance(pool, str):
            raise _Refused(422, "validation_error", 'the body must be {"pool": NAME}')
        if pool not in self.pools:
            raise _Refused(404, "not_found", f"no pool {pool!r} here")
        self._wakes.put(pool)
        return pool


def _handler(endpoint: WakeEndpoint) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self._answer("POST")

        def do_GET(self) -> None:
            self._answer("GET")

        def do_PUT(self) -> None:
            self._answer("PUT")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

        def _answer(self, method: str) -> None:
            try:
                length = int(self.headers.get("content-length") or 0)
            except ValueError:
                length = -1
            try:
                if length < 0:
                    raise _Refused(400, "invalid_request", "a bad Content-Length")
                if length > MAX_BODY_BYTES:
                    raise _Refused(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")
                body = self.rfile.read(length)
                content_type = self.headers.get("content-type") or ""
                pool = endpoint.accept(method, self.path, content_type, body)
            except _Refused as refused:
                self._send(
                    refused.status, {"error": {"type": refused.kind, "message": refused.message}}
                )
                return
            self._send(202, {"pool": pool})

        def _send(self, status: int, document: object) -> None:
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("wake endpoint: " + format, *args)

    return Handler
