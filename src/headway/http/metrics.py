"""Prometheus plumbing shared by the gateway and the worker.

Each app owns its own ``CollectorRegistry`` (no global state), so several apps
can live in one test process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from headway.http.asgi import Handler, Request, Response

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def metrics_handler(registry: CollectorRegistry) -> Handler:
    async def handle(request: Request) -> Response:
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    return handle
