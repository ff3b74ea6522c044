"""The HTTP face of a process that serves no API of its own (the billing consumer, the
batch executor): ``/healthz``, ``/readyz`` and ``/metrics``, and its start and stop."""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry

from headway.http.asgi import App, Request, Response, json_response
from headway.http.edge import Edge
from headway.http.metrics import metrics_handler
from headway.http.router import Route, Router


class Operated(Protocol):
    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def ops_app(service: Operated, metrics: CollectorRegistry) -> App:
    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        return json_response({"ready": service.ready}, 200 if service.ready else 503)

    router = Router(
        [
            Route("GET", "/healthz", "healthz", healthz),
            Route("GET", "/readyz", "readyz", readyz),
            Route("GET", "/metrics", "metrics", metrics_handler(metrics)),
        ]
    )
    return App(
        Edge(router, max_body_bytes=1024), on_startup=[service.start], on_shutdown=[service.stop]
    )
