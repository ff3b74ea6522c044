"""Running an ASGI app under uvicorn (uvloop + httptools), on a port or an inherited socket."""

from __future__ import annotations

import logging
import socket

import uvicorn

from headway.http.asgi import App

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose connections send small writes at once.

    Accepted connections inherit TCP_NODELAY from the listener. Without it a
    response written as headers then body stalls ~40 ms on a kept-alive
    connection (Nagle's algorithm waiting on the peer's delayed ACK).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.set_inheritable(True)
    return sock


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)


def serve(app: App, *, host: str, port: int, fd: int | None, log_level: str) -> None:
    """Blocks until SIGINT/SIGTERM, then shuts down gracefully (in-flight requests finish)."""
    if fd is None:
        sock = listening_socket(host, port)  # TCP_NODELAY, set where the socket is made
        fd = sock.fileno()
    config = uvicorn.Config(
        app,
        fd=fd,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        log_level=log_level,
        timeout_graceful_shutdown=30,
        # Longer than the gateway client's 30 s keep-alive, so the client closes an
        # idle connection first and never reuses one the server is closing.
        timeout_keep_alive=75,
        limit_concurrency=None,
        backlog=4096,
    )
    uvicorn.Server(config).run()
