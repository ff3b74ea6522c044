"""The gateway's operations listener: ``/metrics``, ``/healthz`` and ``/readyz`` for
Prometheus, probes and operators, on its own socket (``gateway.ops_host``/``ops_port``).

The client port does not serve ``/metrics``: its series are labelled by tenant (names,
volumes, latencies, errors) and its counters move with other tenants' requests (a cache
hit is one more ``headway_cache_lookups_total``), so whoever can read it watches every
tenant. Here it is behind the network instead (the NetworkPolicy opens this port to
Prometheus alone). ``/healthz`` and ``/readyz`` are on both: load balancers probe the
port they send clients to, and neither says anything about a tenant.

The app runs in the gateway's process and event loop (``serve.OpsListener``), with the
gateway's registry and its answers counted by the same ``Edge`` observer; it has no
lifespan of its own (the client app's starts and stops the service).
"""

from __future__ import annotations

from headway.gateway import routes
from headway.gateway.service import GatewayService
from headway.http.asgi import App
from headway.http.edge import Edge
from headway.http.metrics import metrics_handler
from headway.http.router import Route, Router

OPS_PATHS = ("/metrics", "/healthz", "/readyz")
"""What the operations listener serves; of these, only ``/metrics`` is not on the client port."""

MAX_BODY_BYTES = 1024
"""Every route here is a GET: no body is read beyond this."""


def build_ops_app(service: GatewayService) -> App:
    router = Router(
        [
            Route("GET", "/metrics", "metrics", metrics_handler(service.metrics.registry)),
            Route("GET", "/healthz", "healthz", routes.healthz),
            Route("GET", "/readyz", "readyz", routes.readyz(service)),
        ]
    )
    return App(Edge(router, max_body_bytes=MAX_BODY_BYTES, observer=service.metrics))
