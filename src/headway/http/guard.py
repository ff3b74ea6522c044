"""The edge defends itself: uvicorn's httptools protocol with a header-read timeout, an idle
timeout, and caps on open connections per process and per client address.

uvicorn times a connection out only between requests (keep-alive): one that connects and
sends nothing, or sends half a request line or half its headers, is held for ever, so a
few thousand of them from one client use up the process's descriptors. Here each
connection is always in one phase, and each phase but one runs a timer:

    connected ─▶ headers ──(headers complete)──▶ busy ──(response sent)──▶ idle ─┐
                    ▲       header_timeout_s        no timer: the request's         │
                    │                               own deadline governs            │
                    └────────────────(first byte)──── idle_timeout_s ◀──────────────┘

- **headers**: from connecting, or from the first byte after an idle spell, until the
  request's headers are all in. The clock is not restarted by each byte, so a client
  dripping one byte a second is dropped as surely as a silent one. On expiry see
  ``on_header_timeout``.
- **idle**: uvicorn's own keep-alive timer, set to ``idle_timeout_s``; on expiry the
  connection is closed without a word (a client reusing it will open another).
- A request line and headers past ``max_header_bytes`` (httptools sets no bound) are
  answered 431 and the connection closed.
- A client that disconnects while its request is being served has that request's task
  cancelled here, its ``Disconnect`` (the scope's ``DISCONNECT_EXTENSION``) marked first,
  so the app needs no watcher task per request to learn of it (``http/asgi.py``).
- A connection over a cap (``ConnectionCaps``) is answered 503 with ``Connection: close``
  and a JSON error and closed at once, before anything it sends is read: it costs an
  accept, a protocol object and a write; no timer is armed and nothing is parsed.

One ``EdgeGuard`` per process holds the caps and the observer every connection shares
(all on the event loop's thread, so no locks); ``guarded_protocol`` binds it into the
protocol class uvicorn instantiates per connection.
"""

from __future__ import annotations

import asyncio
import json
from asyncio import TimerHandle
from typing import Any, ClassVar, Literal, cast

from prometheus_client import CollectorRegistry
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, Scope
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from headway.http.asgi import DISCONNECT_EXTENSION, Disconnect
from headway.http.connection_caps import ConnectionCaps, Refusal
from headway.http.connection_metrics import (
    ConnectionMetrics,
    ConnectionObserver,
    NoConnectionObserver,
)
from headway.settings import EdgeLimits

HeaderExpiry = Literal["close", "answer_408", "close_after_response"]


def on_header_timeout(*, request_begun: bool, response_in_flight: bool) -> HeaderExpiry:
    """What a connection whose request headers are late gets.

    - An earlier (pipelined) request's response is still going out: it finishes, then
      the connection closes; the late request is dropped unanswered.
    - A request was begun: 408 with ``Connection: close``, then close.
    - Nothing was sent at all: closed without a word; nobody is waiting for an answer.
    """
    if response_in_flight:
        return "close_after_response"
    return "answer_408" if request_begun else "close"


def _raw_response(status: bytes, error_type: str, message: str) -> bytes:
    body = json.dumps({"error": {"type": error_type, "message": message}}).encode()
    head = (
        b"HTTP/1.1 " + status + b"\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n"
    )
    return head + body


REFUSED: dict[Refusal, bytes] = {
    "max_connections": _raw_response(
        b"503 Service Unavailable",
        "too_many_connections",
        "the server holds as many connections as it allows; try again shortly",
    ),
    "max_connections_per_client": _raw_response(
        b"503 Service Unavailable",
        "too_many_connections",
        "this address holds as many connections as one client may; reuse one or close some",
    ),
}
HEADERS_TOO_LARGE = _raw_response(
    b"431 Request Header Fields Too Large",
    "headers_too_large",
    "the request line and headers are larger than this server accepts",
)


class EdgeGuard:
    """What every connection of one server process shares: its limits, caps and observer."""

    def __init__(
        self,
        limits: EdgeLimits,
        caps: ConnectionCaps | None = None,
        observer: ConnectionObserver | None = None,
    ) -> None:
        self.limits = limits
        self.caps = caps or ConnectionCaps(
            limits.max_connections, limits.max_connections_per_client
        )
        self.observer: ConnectionObserver = observer or NoConnectionObserver()
        self.request_timeout = _raw_response(
            b"408 Request Timeout",
            "request_timeout",
            f"the request line and headers did not arrive within {limits.header_timeout_s:g}s",
        )


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's protocol under an ``EdgeGuard``; use ``guarded_protocol`` to bind one."""

    edge_guard: ClassVar[EdgeGuard]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # uvicorn's keep-alive timer is the idle timer (typed int there; call_later takes float)
        self.timeout_keep_alive = self.edge_guard.limits.idle_timeout_s  # type: ignore[assignment]
        self._header_timer: TimerHandle | None = None
        self._request_begun = False
        self._header_bytes = 0  # received while the current request's headers are not all in
        self._admitted_client: str | None = None  # its slot in the caps, until closed
        self._serving: tuple[RequestResponseCycle, asyncio.Task[None], Disconnect] | None = None

    # Connection lifetime: a slot in the caps, or a refusal.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else ""
        guard = self.edge_guard
        refusal = guard.caps.admit(client)
        if refusal is not None:
            guard.observer.refused(refusal)
            transport.write(REFUSED[refusal])
            transport.close()
            return
        self._admitted_client = client
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            _disconnect_of(self.cycle).happened = True
        serving, self._serving = self._serving, None
        if serving is not None:
            cycle, task, disconnect = serving
            if not cycle.response_complete and not task.done():
                disconnect.happened = True
                task.cancel()
        if self._admitted_client is not None:
            self.edge_guard.caps.release(self._admitted_client)
            self._admitted_client = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._admitted_client is None:
            return  # refused: closing, nothing it sends is read
        super().data_received(data)
        if self._header_timer is not None and not self.transport.is_closing():
            # headers still incomplete after parsing this: every byte of it was headers
            self._header_bytes += len(data)
            if self._header_bytes > self.edge_guard.limits.max_header_bytes:
                self._cancel_header_timer()
                self.edge_guard.observer.refused("max_header_bytes")
                self.transport.write(HEADERS_TOO_LARGE)
                self.transport.close()
                return
        # Bytes that began no request (blank lines after an idle spell) stopped uvicorn's
        # idle timer: the header timer runs instead, so they cannot keep a connection.
        if (
            self._header_timer is None
            and self.timeout_keep_alive_task is None
            and not self._response_in_flight()
            and not self.transport.is_closing()
        ):
            self._arm_header_timer()

    # The header timer.

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True
        if self._header_timer is None:
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self._request_begun = False
        self._header_bytes = 0
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[DISCONNECT_EXTENSION] = Disconnect()
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """uvicorn's, with the task remembered as it starts (to cancel it if the client
        leaves); a request whose client left before its task started is not run."""
        disconnect = _disconnect_of(cycle)

        async def remembered(scope: Scope, receive: ASGIReceiveCallable, send: Any) -> None:
            if disconnect.happened:
                return
            task = asyncio.current_task()
            assert task is not None
            self._serving = (cycle, task, disconnect)
            await app(scope, receive, send)

        super()._start_asgi_task(cycle, remembered)

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.edge_guard.limits.header_timeout_s, self._header_timeout
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _response_in_flight(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        self.edge_guard.observer.timed_out("headers")
        expiry = on_header_timeout(
            request_begun=self._request_begun, response_in_flight=self._response_in_flight()
        )
        if expiry == "close_after_response":
            self.cycle.keep_alive = False
            return
        if expiry == "answer_408":
            self.transport.write(self.edge_guard.request_timeout)
        self.transport.close()

    # The idle timer is uvicorn's keep-alive, at idle_timeout_s; only counted here.

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.edge_guard.observer.timed_out("idle")
        super().timeout_keep_alive_handler()


def _disconnect_of(cycle: RequestResponseCycle) -> Disconnect:
    return cast(Disconnect, cycle.scope["extensions"][DISCONNECT_EXTENSION])


def measured_guard(limits: EdgeLimits, metrics_registry: CollectorRegistry | None) -> EdgeGuard:
    """A process's guard, its counters and open-connection gauge in ``metrics_registry``
    (the app's own, so they show on its /metrics); none counted without one."""
    caps = ConnectionCaps(limits.max_connections, limits.max_connections_per_client)
    if metrics_registry is None:
        return EdgeGuard(limits, caps)
    return EdgeGuard(limits, caps, ConnectionMetrics(metrics_registry, lambda: caps.open))


def guarded_protocol(guard: EdgeGuard) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``Config(http=...)``, every connection under ``guard``."""

    class Guarded(GuardedHttpToolsProtocol):
        edge_guard = guard

    return Guarded
