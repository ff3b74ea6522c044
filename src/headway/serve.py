"""Running an ASGI app under uvicorn (uvloop + httptools), on a port or an inherited socket."""

from __future__ import annotations

import logging

import uvicorn

from headway.http.asgi import App

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)


def serve(app: App, *, host: str, port: int, fd: int | None, log_level: str) -> None:
    """Blocks until SIGINT/SIGTERM, then shuts down gracefully (in-flight requests finish)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        fd=fd,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,
        log_level=log_level,
        timeout_graceful_shutdown=30,
        limit_concurrency=None,
        backlog=4096,
    )
    uvicorn.Server(config).run()
