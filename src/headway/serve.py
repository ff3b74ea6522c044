"""Running an ASGI app under uvicorn (uvloop + httptools), on a port or an inherited socket."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn
from prometheus_client import CollectorRegistry

from headway.heap import settle_heap
from headway.http.asgi import App
from headway.http.guard import guarded_protocol, measured_guard
from headway.settings import EdgeLimits

BACKLOG = 4096


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
        logging.getLogger(__name__).info(
            "draining: unready now, closing in %.1fs", self._drain_delay_s
        )
        timer = threading.Timer(self._drain_delay_s, self._close)
        timer.daemon = True
        timer.start()

    def _close(self) -> None:
        """uvicorn's exit, without its re-raising the signal once it has shut down: a
        drained shutdown is a clean exit (status 0), not a death by signal."""
        self.should_exit = True


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
) -> None:
    """Blocks until SIGINT/SIGTERM, then shuts down gracefully (in-flight requests finish).

    Every connection is under ``edge``'s timeouts and caps (``http/guard.py``), counted on
    ``metrics_registry`` when given (the app's own, so they show on its /metrics); with
    ``ssl_context``, the TLS handshake too (the guard runs it, not the loop)."""
    # TCP_NODELAY is set where the socket is made. uvicorn is handed the socket itself, not
    # a descriptor it would duplicate: on shutdown it closes it, and nothing else holds it
    # open, so new connections are refused while in-flight requests finish.
    app.add_startup_hook(settle_heap)  # once started: see headway/heap.py
    sock = listening_socket(host, port) if fd is None else socket.socket(fileno=fd)
    edge = edge or EdgeLimits()
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=guarded_protocol(measured_guard(edge, metrics_registry, ssl_context)),
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
        backlog=4096,
    )
    # HTTPS: the guard wraps each admitted connection in ``ssl_context`` (``headway.tls``
    # swaps its certificates without a restart); uvicorn serves plain TCP and takes
    # scope["scheme"] from each connection's transport (https once wrapped).
    DrainingServer(config, drain, drain_delay_s).run(sockets=[sock])
