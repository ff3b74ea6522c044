"""Running an ASGI app under uvicorn (uvloop + httptools), on a port or an inherited socket;
and beside it, in the same process and event loop, an operations listener of its own.

The operations listener (``OpsListener``: the gateway's ``/metrics``, ``app/ops.py``)
is a second uvicorn server on its own socket, app and ``EdgeGuard``: its caps are its own,
so a flood of the client port cannot take the slots a scrape needs (nor the reverse); its
refusals and timeouts are counted with the client listener's. It starts listening with
the client listener, keeps answering through the drain (Prometheus sees ``/readyz`` turn
503), and closes once the client listener has shut down. Signals are the client
listener's (``DrainingServer``); if the operations listener fails, the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType

import uvicorn
from prometheus_client import CollectorRegistry

from headway.heap import settle_heap
from headway.http.asgi import App
from headway.http.guard import EdgeGuard, guarded_protocol, measured_guard
from headway.settings import EdgeLimits

BACKLOG = 4096
OPS_SHUTDOWN_S = 5
"""How long the operations listener waits for a scrape in flight once the client listener
has shut down (the client listener's own is in ``client_config``)."""

log = logging.getLogger(__name__)


def listening_socket(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """A listening TCP socket whose connections send small writes at once.

    Accepted connections inherit TCP_NODELAY from the listener. Without it a
    response written as headers then body stalls ~40 ms on a kept-alive
    connection (Nagle's algorithm waiting on the peer's delayed ACK).
    ``listen=False``: bound only, holding the port while connections to it are
    refused (a worker ``headway up`` has not started); ``sock.listen(BACKLOG)`` later.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


class DrainingServer(uvicorn.Server):
    """On the first SIGTERM/SIGINT: call ``drain`` (turn unready), keep serving for
    ``drain_delay_s`` so load balancers notice, then shut down gracefully (stop
    accepting, finish in-flight requests). A second signal exits at once."""

    def __init__(
        self, config: uvicorn.Config, drain: Callable[[], None] | None, drain_delay_s: float
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._drain_delay_s = drain_delay_s
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit or self._draining:
            self.should_exit = self.force_exit = True
            return
        if self._drain is None or self._drain_delay_s <= 0:
            self._close()
            return
        self._draining = True
        self._drain()
        log.info("draining: unready now, closing in %.1fs", self._drain_delay_s)
        timer = threading.Timer(self._drain_delay_s, self._close)
        timer.daemon = True
        timer.start()

    def _close(self) -> None:
        """uvicorn's exit, without its re-raising the signal once it has shut down: a
        drained shutdown is a clean exit (status 0), not a death by signal."""
        self.should_exit = True


class SideServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signals alone: it runs beside a
    ``DrainingServer``, which handles them, and is told when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True, slots=True)
class OpsListener:
    """The operations listener of a process: its app, address (or inherited socket) and
    edge limits."""

    app: App
    host: str
    port: int
    fd: int | None = None
    edge: EdgeLimits = field(default_factory=EdgeLimits)


def serve(
    app: App,
    *,
    host: str,
    port: int,
    fd: int | None,
    log_level: str,
    drain: Callable[[], None] | None = None,
    drain_delay_s: float = 0.0,
    edge: EdgeLimits | None = None,
    metrics_registry: CollectorRegistry | None = None,
    ssl_context: ssl.SSLContext | None = None,
    ops: OpsListener | None = None,
    tls_callers: frozenset[str] | None = None,
    tls_loopback_callers: frozenset[str] = frozenset(),
) -> None:
    """Blocks until SIGINT/SIGTERM, then shuts down gracefully (in-flight requests finish).

    Every connection is under ``edge``'s timeouts and caps (``http/guard.py``), counted on
    ``metrics_registry`` when given (the app's own, so they show on its /metrics); those of
    ``ops`` under its own limits and caps, counted alike. With ``ssl_context`` both listeners
    speak HTTPS, the TLS handshake run by the guard (not the loop) under its timers;
    ``tls_callers``: the identities a client certificate must name (``tls/identity.py``),
    and ``tls_loopback_callers`` those it may name from a loopback address."""
    # TCP_NODELAY is set where the socket is made. uvicorn is handed the socket itself, not
    # a descriptor it would duplicate: on shutdown it closes it, and nothing else holds it
    # open, so new connections are refused while in-flight requests finish.
    app.add_startup_hook(settle_heap)  # once started: see headway/heap.py
    sock = listening_socket(host, port) if fd is None else socket.socket(fileno=fd)
    guard = measured_guard(
        edge or EdgeLimits(), metrics_registry, ssl_context, tls_callers, tls_loopback_callers
    )
    config = client_config(app, guard, log_level)
    server = DrainingServer(config, drain, drain_delay_s)
    if ops is None:
        server.run(sockets=[sock])
        return
    ops_sock = (
        listening_socket(ops.host, ops.port) if ops.fd is None else socket.socket(fileno=ops.fd)
    )
    side = SideServer(ops_config(ops, guard, log_level))
    ops_host, ops_port = ops_sock.getsockname()[:2]
    scheme = "https" if ssl_context is not None else "http"
    log.info("operations listener (/metrics) on %s://%s:%d", scheme, ops_host, ops_port)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve_beside(server, sock, side, ops_sock))


def client_config(app: App, guard: EdgeGuard, log_level: str) -> uvicorn.Config:
    """The client listener's: ``app`` with its lifespan, every connection under ``guard``
    (which wraps it in TLS itself, when it has a context: uvicorn serves plain TCP and takes
    scope["scheme"] from each connection's transport, https once wrapped)."""
    return uvicorn.Config(
        app,
        loop="uvloop",
        http=guarded_protocol(guard),
        ws="none",  # no websocket routes; an upgrade would leave the guard's accounting
        lifespan="on",
        # X-Forwarded-For is believed only from edge.trusted_proxies (http/client_address.py),
        # not from uvicorn's default of 127.0.0.1.
        proxy_headers=False,
        access_log=False,
        log_config=None,
        log_level=log_level,
        timeout_graceful_shutdown=30,
        # The keep-alive (idle) timeout is the guard's: edge.idle_timeout_s.
        limit_concurrency=None,
        backlog=BACKLOG,
    )


def ops_config(ops: OpsListener, client_guard: EdgeGuard, log_level: str) -> uvicorn.Config:
    """The operations listener's: no lifespan (the client app's starts and stops what both
    serve); a guard of its own, on ``ops.edge``, counting on the client guard's observer and
    shaking hands in its TLS context."""
    return uvicorn.Config(
        ops.app,
        loop="uvloop",
        http=guarded_protocol(
            EdgeGuard(ops.edge, observer=client_guard.observer, tls=client_guard.tls)
        ),
        ws="none",
        lifespan="off",
        proxy_headers=False,
        access_log=False,
        log_config=None,
        log_level=log_level,
        timeout_graceful_shutdown=OPS_SHUTDOWN_S,
        limit_concurrency=None,
        backlog=BACKLOG,
    )


async def serve_beside(
    main: uvicorn.Server, sock: socket.socket, side: uvicorn.Server, side_sock: socket.socket
) -> None:
    """``main`` on ``sock`` until it shuts down, ``side`` on ``side_sock`` meanwhile; if
    ``side`` stops on its own (it failed), ``main`` is told to exit."""
    side_task = asyncio.create_task(side.serve(sockets=[side_sock]))

    def side_ended(task: asyncio.Task[None]) -> None:
        if not side.should_exit and not main.should_exit:
            failure = None if task.cancelled() else task.exception()
            log.error("the operations listener stopped (%r): stopping this process", failure)
            main.should_exit = True

    side_task.add_done_callback(side_ended)
    try:
        await main.serve(sockets=[sock])
    finally:
        side.should_exit = True
        await side_task
