"""The edge defends itself: uvicorn's httptools protocol with a TLS handshake, header, body and
idle timeouts, a header size bound, and caps on open connections per process and per client.

uvicorn times a connection out only between requests, so one that sends nothing, or half a
request, is held for ever, and a few thousand from one client use up the descriptors. Here a
connection is always in one phase (handshake, headers, body, busy, idle, then headers again at
idle's first byte), and every phase but ``busy`` (the request's own deadline) runs a timer:

- **handshake** (TLS) and **headers**: ``header_timeout_s`` from connecting, or from the first
  byte after idle, never restarted by a byte, so a client dripping a byte a second goes as
  surely as a silent one (``on_header_timeout``). A connection is admitted and timed before its
  handshake, so one that never sends its ClientHello counts against the caps and is not held
  for asyncio's 60 s.
- **body**: the pace rule of ``request_limits.py``; late, it is answered 408 (unless the app
  has begun its answer) and closed. Its clock restarts while the server has stopped reading or
  still owes ``100 Continue``: only the client's slowness counts.
- **idle**: uvicorn's keep-alive timer at ``idle_timeout_s``; closed without a word.

A request line and headers past ``max_header_bytes`` (httptools sets no bound), counted whatever
the reads' boundaries, get 431 and a close before they are parsed; a pipelined request's
headers, begun in the read that ended the one before, are bounded by what the parser hands over.
An answer sent before the body is all in lingers (``_LingeringTransport``): the write side is
shut and the rest dropped unparsed, within ``linger_s`` and ``linger_bytes``, so a client that
reads only once it has sent its body reads the answer, not a reset. A client that leaves
mid-request has its request's task cancelled, its ``Disconnect`` marked first, so the app needs
no watcher task per request (``http/asgi.py``).

Over TLS with ``callers`` set, a certificate naming none of them (another role's, signed by the
same CA; ``loopback_callers`` pass from loopback only) is closed as the handshake ends, before a
byte is read; its names are in each request's scope (``tls/identity.PEER_EXTENSION``). A
connection over a cap (``ConnectionCaps``) gets 503 and a JSON error and is closed (over TLS
only closed: a TLS client cannot read a plain answer) before anything it sends is read; no timer
is armed. Clients are counted by ``client_address`` (IPv6 by its /64), a trusted proxy only
against the process. One ``EdgeGuard`` per process holds what every connection shares, all on
the event loop's thread, so no locks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
from asyncio import TimerHandle
from typing import Any, ClassVar, Literal, cast

from prometheus_client import CollectorRegistry
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, Scope
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from headway.http.asgi import DISCONNECT_EXTENSION, Disconnect
from headway.http.client_address import TrustedProxies, client_address
from headway.http.connection_caps import ConnectionCaps, Refusal
from headway.http.connection_metrics import (
    ConnectionMetrics,
    ConnectionObserver,
    NoConnectionObserver,
)
from headway.http.request_limits import TAIL_BYTES, body_deadline, header_section_size
from headway.http.tls_handshake import wrap_server_side
from headway.settings import EdgeLimits
from headway.tls.identity import PEER_EXTENSION, accepted, peer_names

HeaderExpiry = Literal["close", "answer_408", "close_after_response"]
HEADER_OVERHEAD = 4
"""Bytes of a header line besides its name and value: the colon, a space and the CRLF."""
COALESCE_BYTES = 64 * 1024
"""Writes of one event-loop turn are held to go out as one up to this many bytes."""


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


class _HeadersTooLarge(Exception):
    """Raised from a parser callback: what the parser handed over is already too large."""


class EdgeGuard:
    """What every connection of one server process shares: its limits, caps and observer,
    and the TLS context of its handshakes (None: plain HTTP)."""

    def __init__(
        self,
        limits: EdgeLimits,
        caps: ConnectionCaps | None = None,
        observer: ConnectionObserver | None = None,
        tls: ssl.SSLContext | None = None,
        callers: frozenset[str] | None = None,
        loopback_callers: frozenset[str] = frozenset(),
    ) -> None:
        """``callers``: the identities a TLS client's certificate must carry
        (``tls/identity.py``); None: any certificate the context accepts.
        ``loopback_callers``: identities accepted besides, from a loopback address only
        (a pod's own probes, presenting its own certificate)."""
        self.limits = limits
        self.callers = callers
        self.loopback_callers = loopback_callers
        self.caps = caps or ConnectionCaps(
            limits.max_connections, limits.max_connections_per_client
        )
        self.observer: ConnectionObserver = observer or NoConnectionObserver()
        self.tls = tls
        self.trusted = TrustedProxies(limits.trusted_proxies)
        self.request_timeout = _raw_response(
            b"408 Request Timeout",
            "request_timeout",
            f"the request line and headers did not arrive within {limits.header_timeout_s:g}s",
        )
        self.body_timeout = _raw_response(
            b"408 Request Timeout",
            "request_timeout",
            f"the request body arrived slower than {limits.body_min_rate_bytes_s:g} bytes/s "
            f"after its first {limits.body_timeout_s:g}s",
        )
        self.headers_too_large = _raw_response(
            b"431 Request Header Fields Too Large",
            "headers_too_large",
            f"the request line and headers are larger than {limits.max_header_bytes} bytes",
        )


class _PacedFlow(FlowControl):
    """uvicorn's flow control, telling the protocol when the server stops and starts
    reading (the body's clock runs only while it reads)."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpToolsProtocol) -> None:
        super().__init__(transport)
        self._protocol = protocol

    def pause_reading(self) -> None:
        if not self.read_paused:
            super().pause_reading()
            self._protocol.reading_paused()

    def resume_reading(self) -> None:
        if self.read_paused:
            super().resume_reading()
            self._protocol.reading_resumed()


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: ``close`` lingers while the request's
    body is still coming (the answer came first; see the module docstring), and the
    connection then reads as closing; writes made in one turn of the event loop go out as
    one (uvicorn writes a response's head and its body apart: two system calls, and often
    two segments, where one does), up to ``COALESCE_BYTES``, past which they go at once so
    that a large answer meets the transport's flow control as before; everything else is
    the transport's own."""

    __slots__ = ("_pending", "_pending_bytes", "_protocol", "_raw")

    def __init__(self, raw: asyncio.Transport, protocol: GuardedHttpToolsProtocol) -> None:
        self._raw, self._protocol = raw, protocol
        self._pending: list[bytes] | None = None
        self._pending_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [data]
            self._protocol.loop.call_soon(self.flush)
        else:
            self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= COALESCE_BYTES:
            self.flush()

    def flush(self) -> None:
        """What this turn wrote, in one write (at the end of the turn, or before a close)."""
        pending, self._pending, self._pending_bytes = self._pending, None, 0
        if pending and not self._raw.is_closing():
            self._raw.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def write_eof(self) -> None:
        self.flush()
        self._raw.write_eof()

    def close(self) -> None:
        self.flush()
        if not self._protocol.linger(self._raw):
            self._raw.close()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._raw.is_closing()


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
        self._header_bytes = 0  # of the current request's line and headers, in earlier reads
        self._header_tail = b""  # the last bytes of those reads
        self._parsed_header_bytes = 0  # what the parser handed over of them
        self._headers_done_in_read = False
        self._headers_too_large = False
        self._in_body = False  # headers in, body not yet
        self._body_timer: TimerHandle | None = None
        self._body_started = 0.0
        self._body_received = 0
        self._handshake: tuple[asyncio.Transport, asyncio.Future[None]] | None = None
        self._handshake_timed_out = False
        self._admitted_client: str | None = None  # its slot in the caps, until closed
        self.lingering = False
        self._linger_left = 0
        self._linger_timer: TimerHandle | None = None
        self._serving: tuple[RequestResponseCycle, asyncio.Task[None], Disconnect] | None = None
        self._peer: frozenset[str] = frozenset()  # the names in the client's certificate
        self._peer_host: str | None = None

    # Connection lifetime: a slot in the caps, or a refusal; then TLS, if any.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._handshake is not None:  # again, with the TLS transport: the handshake is done
            self._handshake = None
            self._peer = peer_names(transport.get_extra_info("peercert"))
            if not self._identity_accepted():
                # A certificate of the CA, but of a role this listener does not serve.
                super().connection_made(transport)  # uvicorn's state, for connection_lost
                self._cancel_header_timer()
                self.edge_guard.observer.refused("tls_identity")
                self._release()
                transport.close()
                return
            self._begin(transport)
            return
        guard = self.edge_guard
        peer = get_remote_addr(transport)
        host = peer[0] if peer else None
        client = client_address(host)
        refusal = guard.caps.admit(client, exempt=host in guard.trusted)
        if refusal is not None:
            super().connection_made(transport)  # uvicorn's state, for connection_lost
            guard.observer.refused(refusal)
            if guard.tls is None:
                transport.write(REFUSED[refusal])
            transport.close()
            return
        self._admitted_client = client
        self._peer_host = host
        self._arm_header_timer()
        if guard.tls is None:
            self._begin(transport)
            return
        timeout_s = guard.limits.header_timeout_s
        waiter = wrap_server_side(self.loop, transport, self, guard.tls, timeout_s + 1.0)
        self._handshake = (transport, waiter)
        waiter.add_done_callback(self._handshake_done)

    def _identity_accepted(self) -> bool:
        guard = self.edge_guard
        if guard.callers is None or accepted(self._peer, guard.callers):
            return True
        return _loopback(self._peer_host) and accepted(self._peer, guard.loopback_callers)

    def _begin(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self.flow = _PacedFlow(transport, self)
        self.transport = cast(asyncio.Transport, _LingeringTransport(transport, self))

    def linger(self, raw: asyncio.Transport) -> bool:
        """Asked to close: when the body is still coming, shut the write side and read the
        rest (dropped) for a while instead; whether it lingers. Asked again (a shutdown, a
        timer): it closes."""
        if self.lingering:
            return False
        limits = self.edge_guard.limits
        if not self._in_body or limits.linger_s <= 0 or raw.is_closing():
            return False
        self.lingering = True
        self._in_body = False
        self._cancel_body_timer()
        self._cancel_header_timer()
        self._linger_left = limits.linger_bytes
        self._linger_timer = self.loop.call_later(limits.linger_s, raw.close)
        if raw.can_write_eof():
            raw.write_eof()  # the answer, then FIN: the client knows no more is coming
        self.flow.resume_reading()
        return True

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.cancelled():
            waiter.exception()  # retrieved: a failed handshake is counted, not logged
        if self._handshake is None:
            return  # connection_made had the TLS transport: done
        # Failed, or the connection closed first (the waiter may then say nothing at all).
        self._handshake = None
        self._cancel_header_timer()
        if not self._handshake_timed_out:
            self.edge_guard.observer.refused("tls_handshake")
        self._release()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._cancel_body_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            _disconnect_of(self.cycle).happened = True
        serving, self._serving = self._serving, None
        if serving is not None:
            cycle, task, disconnect = serving
            if not cycle.response_complete and not task.done():
                disconnect.happened = True
                task.cancel()
        self._release()
        super().connection_lost(exc)

    def _release(self) -> None:
        if self._admitted_client is not None:
            self.edge_guard.caps.release(self._admitted_client)
            self._admitted_client = None

    def data_received(self, data: bytes) -> None:
        if self._admitted_client is None:
            return  # refused: closing, nothing it sends is read
        if self.lingering:  # the rest of a refused body: dropped unread, up to a bound
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.transport.abort()
            return
        max_bytes = self.edge_guard.limits.max_header_bytes
        reading_headers = not self._in_body
        if reading_headers and self._header_bytes + len(data) > max_bytes:
            size = header_section_size(self._header_bytes, self._header_tail, data)
            if size is None or size > max_bytes:
                self._refuse_headers()
                return
        self._headers_done_in_read = False
        super().data_received(data)
        if self.transport.is_closing():
            return
        if reading_headers and not self._headers_done_in_read and not self._in_body:
            # every byte of this read was the current request's line and headers (or blank
            # lines before one)
            self._header_bytes += len(data)
            self._header_tail = (self._header_tail + data)[-TAIL_BYTES:]
        if self._in_body and self._body_timer is None and not self.flow.read_paused:
            self._arm_body_timer()
        # Bytes that began no request (blank lines after an idle spell) stopped uvicorn's
        # idle timer: the header timer runs instead, so they cannot keep a connection.
        if (
            self._header_timer is None
            and not self._in_body
            and self.timeout_keep_alive_task is None
            and not self._response_in_flight()
        ):
            self._arm_header_timer()

    # The header timer and the header bytes.

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True
        self._parsed_header_bytes = 0
        if self._header_timer is None:
            self._arm_header_timer()

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + HEADER_OVERHEAD)
        super().on_header(name, value)

    def _count_parsed(self, size: int) -> None:
        self._parsed_header_bytes += size
        if self._parsed_header_bytes > self.edge_guard.limits.max_header_bytes:
            self._headers_too_large = True
            raise _HeadersTooLarge  # the parser stops; uvicorn answers its 400: ours instead

    def send_400_response(self, msg: str) -> None:
        if self._headers_too_large:
            self._refuse_headers()
            return
        super().send_400_response(msg)

    def _refuse_headers(self) -> None:
        self._cancel_header_timer()
        self.edge_guard.observer.refused("max_header_bytes")
        self.transport.write(self.edge_guard.headers_too_large)
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self._request_begun = False
        self._header_bytes = 0
        self._header_tail = b""
        self._headers_done_in_read = True
        self._in_body = True
        self._body_started = self.loop.time()
        self._body_received = 0
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[DISCONNECT_EXTENSION] = Disconnect()
        if self._peer:
            extensions[PEER_EXTENSION] = self._peer
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
        if self._handshake is not None:
            raw, _ = self._handshake
            self._handshake_timed_out = True
            self.edge_guard.observer.timed_out("handshake")
            raw.abort()  # the handshake's waiter fails: the slot is released there
            return
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

    # The body's pace.

    def on_body(self, body: bytes) -> None:
        self._body_received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_body_timer()
        super().on_message_complete()

    def reading_paused(self) -> None:
        """The server stopped reading: the client cannot be late meanwhile."""
        self._cancel_body_timer()

    def reading_resumed(self) -> None:
        """Reading again: a body still coming starts its clock afresh."""
        if self._in_body and not self.transport.is_closing():
            self._restart_body_clock()

    def _restart_body_clock(self) -> None:
        self._cancel_body_timer()
        self._body_started = self.loop.time()
        self._body_received = 0
        self._arm_body_timer()

    def _arm_body_timer(self) -> None:
        limits = self.edge_guard.limits
        deadline = body_deadline(
            self._body_started,
            self._body_received,
            limits.body_timeout_s,
            limits.body_min_rate_bytes_s,
        )
        self._body_timer = self.loop.call_at(deadline, self._body_timeout)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle.waiting_for_100_continue:  # the server has not asked for the body yet
            self._restart_body_clock()
            return
        limits = self.edge_guard.limits
        deadline = body_deadline(
            self._body_started,
            self._body_received,
            limits.body_timeout_s,
            limits.body_min_rate_bytes_s,
        )
        if self.loop.time() < deadline:  # bytes came since the timer was set: later
            self._arm_body_timer()
            return
        self.edge_guard.observer.timed_out("body")
        if not cycle.response_started:
            self.transport.write(self.edge_guard.body_timeout)
        cycle.disconnected = True  # nothing more is written for it
        cycle.message_event.set()
        self._in_body = False  # a client too slow to send its body is not waited for again
        self.transport.close()

    # The idle timer is uvicorn's keep-alive, at idle_timeout_s; only counted here.

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.edge_guard.observer.timed_out("idle")
        super().timeout_keep_alive_handler()


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _disconnect_of(cycle: RequestResponseCycle) -> Disconnect:
    return cast(Disconnect, cycle.scope["extensions"][DISCONNECT_EXTENSION])


def measured_guard(
    limits: EdgeLimits,
    metrics_registry: CollectorRegistry | None,
    tls: ssl.SSLContext | None = None,
    callers: frozenset[str] | None = None,
    loopback_callers: frozenset[str] = frozenset(),
) -> EdgeGuard:
    """A process's guard, its counters and open-connection gauge in ``metrics_registry``
    (the app's own, so they show on its /metrics); none counted without one. ``tls``: the
    context of its handshakes (None: plain HTTP)."""
    caps = ConnectionCaps(limits.max_connections, limits.max_connections_per_client)
    if metrics_registry is None:
        return EdgeGuard(limits, caps, tls=tls, callers=callers, loopback_callers=loopback_callers)
    metrics = ConnectionMetrics(metrics_registry, lambda: caps.open)
    return EdgeGuard(limits, caps, metrics, tls, callers, loopback_callers)


def guarded_protocol(guard: EdgeGuard) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``Config(http=...)``, every connection under ``guard``."""

    class Guarded(GuardedHttpToolsProtocol):
        edge_guard = guard

    return Guarded
