"""The gateway process's app: the data plane's routes and the control plane's mounts,
behind one edge.

This is the one place that lists the mounts (``headway/control/``: the admin API,
usage, the Batch API, the model store for workers, the console, tenant deletions); the
data plane (``headway/gateway/``) knows none of them. Outermost first, a request meets:
``App`` (ASGI) → ``Edge`` (request id, route, caller check, body, errors, counting) →
the route's handler; for the model endpoints, ``path.serve``.
"""

from __future__ import annotations

from collections.abc import Sequence

from headway import __version__
from headway.billing.prices import PriceBook
from headway.control.admin.mount import admin_mount
from headway.control.batches.mount import batches_mount
from headway.control.batches.parts import BatchParts
from headway.control.console.mount import console_mount
from headway.control.ledger import UsageLedger, ledger_mount
from headway.control.mount import Mount
from headway.control.tenants import TenantData, tenants_mount
from headway.control.usage import usage_mount
from headway.control.weights import WeightsParts, weights_mount
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.endpoints.fit import widths
from headway.gateway.lines.claims import LiveBatches
from headway.gateway.openapi import JSON, DocumentedRoute, Operation, openapi_document
from headway.gateway.routes import data_plane_routes
from headway.gateway.service import GatewayService
from headway.http.asgi import App, Handler, Hook, Request, Response, json_response
from headway.http.client_address import TrustedProxies
from headway.http.edge import Edge
from headway.http.router import Route, Router
from headway.otlp.setup import ProcessTracing


def build_gateway_app(
    service: GatewayService,
    rerank_models: Sequence[str],
    batches: BatchParts | None = None,
    tracing: ProcessTracing | None = None,
    prices: PriceBook | None = None,
    weights: WeightsParts | None = None,
    embed_models: Sequence[str] = (),
    line_callers: frozenset[str] | None = None,
    ledger: UsageLedger | None = None,
) -> App:
    """``rerank_models``: what serves a rerank request that names no model, in order;
    ``batches``: the Batch API's stores (None: no ``/v1/files``, ``/v1/batches`` or batch
    lines); ``tracing``: the process's (None: spans not recorded, traces passed on);
    ``prices``: the price book the console's economics page reads (None: the packaged
    example prices); ``weights``: the model store served to workers (None: no
    ``/v1/weights``); ``embed_models``: what serves an embedding request that names no
    model (TEI's), in order (empty: the last of ``rerank_models``); ``line_callers``: the
    identities a line route's client certificate must name (None: no certificate asked
    for: ``tls.hops.line_callers``); ``ledger``: the usage ledger ``/v1/usage`` and the
    console read (None: none, they answer 503)."""
    tracing = tracing or ProcessTracing()
    keys = KeyChecks(
        service.snapshots,
        service.auth_limiter,
        trusted=TrustedProxies(service.settings.edge.trusted_proxies),
        executor_token=batches.settings.executor_token if batches is not None else "",
        live_batches=LiveBatches(batches.store) if batches is not None else None,
        line_callers=line_callers,
    )
    tenant_data = TenantData(
        service.registry,
        None if batches is None else batches.store,
        None if batches is None else batches.files,
        service.cache.forget_tenant,
    )
    ledger = ledger or UsageLedger()
    mounts: list[Mount] = [
        admin_mount(service, tenant_data.finish),
        ledger_mount(ledger),
        usage_mount(service, ledger),
        tenants_mount(tenant_data),
    ]
    if batches is not None:
        mounts.append(batches_mount(batches))
    if weights is not None:
        mounts.append(weights_mount(weights, keys))
    if service.observability.console.enabled:
        mounts.append(console_mount(service, keys, ledger, prices))
    documented = [
        *data_plane_routes(service, rerank_models, embed_models, lines=batches is not None),
        *(route for mount in mounts for route in mount.routes),
    ]
    # No /metrics here: it is on the operations listener only (app/ops.py).
    documented.append(
        DocumentedRoute(
            Route("GET", "/openapi.json", "openapi", _openapi(documented, service)),
            Operation("This document (OpenAPI 3.1)", JSON),
        )
    )
    checks = keys.table()
    for mount in mounts:
        checks.update(mount.checks)
    edge = Edge(
        Router(d.route for d in documented),
        max_body_bytes=service.settings.limits.max_body_bytes,
        observer=service.metrics,
        tracer=tracing.tracer,
        access_log=service.observability.logging.access,
        checks=checks,
    )

    async def start_mounts() -> None:
        for mount in mounts:
            for hook in mount.on_startup:
                await hook()
            for loop in mount.loops:
                service.run_every(loop.name, loop.interval_s, loop.step)

    closing: list[Hook] = [service.stop]
    closing += [hook for mount in mounts for hook in mount.on_shutdown]
    closing.append(tracing.close)
    return App(edge, on_startup=[service.start, start_mounts, tracing.start], on_shutdown=closing)


def _openapi(documented: list[DocumentedRoute], service: GatewayService) -> Handler:
    """Built on each call, from ``documented`` as it is then (this route included) and the
    widths and prompts of the embedding models served now."""

    async def handle(request: Request) -> Response:
        snapshot = service.snapshots.current
        served = service.pools.served_versions()
        records = [record for record in snapshot.models.values() if record.version in served]
        dimensions = {
            width for record in records if record.kind == "embedding" for width in widths(record)
        }
        token_limit = max((record.max_tokens for record in records), default=0)
        prompts = {
            name for record in records if record.kind == "embedding" for name, _ in record.prompts
        }
        document = openapi_document(
            documented, service.settings.limits, __version__, dimensions, token_limit, prompts
        )
        return json_response(document)

    return handle
