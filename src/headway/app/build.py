"""The gateway as an ASGI app: its routes, each described once, behind the edge.

``gateway_routes`` is the one list of what the gateway serves; the router, the
OpenAPI document and the metrics labels are all read from it. Outermost first,
a request meets: ``App`` (ASGI) → ``Edge`` (request id, route, body, errors,
counting) → the route's handler; for the model endpoints, ``path.serve``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from headway import __version__
from headway.billing.prices import PriceBook
from headway.control import usage
from headway.control.admin import (
    aliases,
    audit,
    billing_customers,
    models,
    rollouts,
    splits,
    tenants,
)
from headway.control.admin.access import AdminParts
from headway.control.batches import batches as batches_api
from headway.control.batches import files
from headway.control.batches.parts import BatchParts
from headway.control.batches.unavailable import guarded as store_guarded
from headway.control.console import routes as console
from headway.control.tenants import FINISH_EVERY_S, TenantData
from headway.control.weights import WeightsParts
from headway.control.weights import routes as weights_routes
from headway.errors import (
    DeadlineExceeded,
    Forbidden,
    HeadwayError,
    InvalidRequest,
    LineNotLive,
    MeteringUnavailable,
    NoReplicas,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    QuotaExceeded,
    Unauthorized,
    UnsupportedMediaType,
    UpstreamFailed,
    UsageUnavailable,
    ValidationFailed,
)
from headway.gateway import routes, schemas
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.auth.kinds import ADMIN_KEY, ANY_KEY, EXECUTOR_TOKEN, TENANT_KEY
from headway.gateway.endpoints import tei
from headway.gateway.endpoints.base import Endpoint
from headway.gateway.endpoints.cohere_v2 import CohereEmbed, CohereRerank
from headway.gateway.endpoints.embeddings import Embeddings
from headway.gateway.endpoints.fit import widths
from headway.gateway.endpoints.rerank import Rerank
from headway.gateway.lines.claims import LiveBatches
from headway.gateway.lines.headers import BATCH_ID as LINE_BATCH_ID
from headway.gateway.lines.headers import KEY_ID as LINE_KEY_ID
from headway.gateway.lines.headers import LINE as LINE_NUMBER
from headway.gateway.lines.headers import MAX_LINE, MAX_TENANT_ID
from headway.gateway.lines.headers import PATHS as LINE_PATHS
from headway.gateway.lines.headers import REQUEST_ID as LINE_REQUEST_ID
from headway.gateway.lines.headers import TENANT_ID as LINE_TENANT_ID
from headway.gateway.openapi import JSON, DocumentedRoute, Operation, openapi_document
from headway.gateway.path import PathParts, serve
from headway.gateway.service import GatewayService
from headway.http.asgi import App, Handler, Hook, Request, Response, json_response
from headway.http.client_address import TrustedProxies
from headway.http.edge import Edge
from headway.http.router import Check, Route, Router
from headway.otlp.setup import ProcessTracing
from headway.protocols import bodies, compat
from headway.protocols.parse import check_media_type

MODEL_ERRORS: tuple[type[HeadwayError], ...] = (
    InvalidRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
    QuotaExceeded,
    UpstreamFailed,
    Overloaded,
    NoReplicas,
    MeteringUnavailable,
    DeadlineExceeded,
)


def build_gateway_app(
    service: GatewayService,
    rerank_models: Sequence[str],
    batches: BatchParts | None = None,
    tracing: ProcessTracing | None = None,
    prices: PriceBook | None = None,
    weights: WeightsParts | None = None,
    embed_models: Sequence[str] = (),
    line_callers: frozenset[str] | None = None,
) -> App:
    """``rerank_models``: what serves a rerank request that names no model, in order;
    ``batches``: the Batch API's stores (None: no ``/v1/files`` or ``/v1/batches``);
    ``tracing``: the process's (None: spans not recorded, traces passed on); ``prices``: the
    price book the console's economics page reads (None: the packaged example prices);
    ``weights``: the model store served to workers (None: no ``/v1/weights``);
    ``embed_models``: what serves an embedding request that names no model (TEI's), in
    order (empty: the last of ``rerank_models``, the embedding model rerank falls back to);
    ``line_callers``: the identities a line route's client certificate must name (None:
    no certificate asked for: ``tls.hops.line_callers``)."""
    tracing = tracing or ProcessTracing()
    tenant_data = TenantData(
        service.registry,
        None if batches is None else batches.store,
        None if batches is None else batches.files,
        service.cache.forget_tenant,
    )
    keys = KeyChecks(
        service.snapshots,
        service.auth_limiter,
        trusted=TrustedProxies(service.settings.edge.trusted_proxies),
        executor_token=batches.settings.executor_token if batches is not None else "",
        weights_token=weights.token if weights is not None else "",
        live_batches=LiveBatches(batches.store) if batches is not None else None,
        line_callers=line_callers,
    )
    checks = keys.table()
    documented = gateway_routes(
        service,
        rerank_models,
        batches,
        prices,
        weights,
        embed_models,
        tenant_data,
        keys=keys,
        checks=checks,
    )
    edge = Edge(
        Router(d.route for d in documented),
        max_body_bytes=service.settings.limits.max_body_bytes,
        observer=service.metrics,
        tracer=tracing.tracer,
        access_log=service.observability.logging.access,
        checks=checks,
    )
    closing: list[Hook] = [service.stop]
    if batches is not None:

        async def close_batch_store() -> None:
            batches.store.close()

        closing.append(close_batch_store)
    closing.append(tracing.close)

    async def finish_deletions() -> None:
        await tenant_data.adopt_legacy()  # batch rows from before tenant ids: their tenants'
        service.run_every("tenant_deletions", FINISH_EVERY_S, tenant_data.finish_pending)

    return App(
        edge, on_startup=[service.start, finish_deletions, tracing.start], on_shutdown=closing
    )


def gateway_routes(
    service: GatewayService,
    rerank_models: Sequence[str],
    batches: BatchParts | None = None,
    prices: PriceBook | None = None,
    weights: WeightsParts | None = None,
    embed_models: Sequence[str] = (),
    tenant_data: TenantData | None = None,
    *,
    keys: KeyChecks,
    checks: dict[str, Check],
) -> list[DocumentedRoute]:
    """Every route, each declaring how its caller is identified (``Route.auth``: a name in
    ``checks``, which the console's session check is added to)."""
    parts = service.parts()
    snapshots, pools = service.snapshots, service.pools
    ledger, wall_clock = service.usage_ledger, service.meter.wall_clock
    admin_usage = usage.admin_usage(snapshots, ledger, wall_clock)
    tenant_data = tenant_data or TenantData(service.registry)
    admin = AdminParts(snapshots, service.registry, tenant_data.finish)
    embeddings, rerank = Embeddings(), Rerank(rerank_models)
    documented = [
        DocumentedRoute(
            _model_route("/v1/embeddings", "embeddings", embeddings, parts),
            _model_operation(
                "Create embeddings (OpenAI-compatible)",
                bodies.EmbeddingsRequest,
                bodies.EmbeddingsResponse,
            ),
        ),
        DocumentedRoute(
            _model_route("/v1/rerank", "rerank", rerank, parts),
            _model_operation(
                "Rerank documents (Cohere v1-compatible)",
                bodies.RerankRequest,
                bodies.RerankResponse,
            ),
        ),
        # Other APIs' clients, unchanged: each route a translation onto the same path.
        *compat_routes(service, parts, embed_models or rerank_models[-1:], rerank_models),
        DocumentedRoute(
            Route(
                "GET", "/v1/models", "models", routes.list_models(snapshots, pools), auth=ANY_KEY
            ),
            Operation(
                "Models being served, by every name they answer to",
                schemas.ModelList,
                errors=(Unauthorized,),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/admin/replicas",
                "admin",
                routes.admin_replicas(snapshots, pools),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Each pool's replicas and routing counts (admin key)",
                schemas.Replicas,
                errors=(Unauthorized, Forbidden),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/v1/usage",
                "usage",
                usage.tenant_usage(snapshots, ledger, wall_clock),
                auth=TENANT_KEY,
            ),
            Operation(
                "The tenant's own billed usage, by hour, day or model",
                schemas.Usage,
                errors=(Unauthorized, Forbidden, ValidationFailed, UsageUnavailable),
                authenticated=True,
                query=usage.query_parameters(admin=False),
            ),
        ),
        DocumentedRoute(
            Route("GET", "/admin/usage", "admin_usage", admin_usage, auth=ADMIN_KEY),
            Operation(
                "Every tenant's billed usage, by hour, day or model (admin key)",
                schemas.Usage,
                errors=(Unauthorized, Forbidden, ValidationFailed, UsageUnavailable),
                authenticated=True,
                query=usage.query_parameters(admin=True),
            ),
        ),
        *(batch_routes(batches, (embeddings, rerank), parts) if batches is not None else []),
        # The model store, for workers on other machines (the registry host's role).
        *(weights_routes(weights) if weights is not None else []),
        # The admin API: each resource's routes are described beside their handlers.
        *tenants.routes(admin),
        *billing_customers.routes(admin),
        *models.routes(admin, pools),
        *aliases.routes(admin),
        *splits.routes(admin),
        *rollouts.routes(admin),
        *audit.routes(admin),
        # The operator console (hidden from the OpenAPI document).
        *(
            console.routes(console.parts_of(service, prices), keys, checks)
            if service.observability.console.enabled
            else []
        ),
        DocumentedRoute(
            Route("GET", "/healthz", "healthz", routes.healthz),
            Operation("The process is up", schemas.Health),
        ),
        DocumentedRoute(
            Route("GET", "/readyz", "readyz", routes.readyz(service)),
            Operation(
                "Ready to serve: every pool has a ready replica (or is cold, and its requests "
                "wait for one) and the gateway is not draining",
                schemas.Readiness,
                other_answers={503: schemas.Readiness},
            ),
        ),
        # No /metrics here: it is on the operations listener only (app/ops.py).
    ]
    documented.append(
        DocumentedRoute(
            Route("GET", "/openapi.json", "openapi", _openapi(documented, service)),
            Operation("This document (OpenAPI 3.1)", JSON),
        )
    )
    return documented


def _model_operation(
    summary: str,
    request: type[msgspec.Struct],
    response: object,
    error_body: type[msgspec.Struct] = bodies.ErrorResponse,
) -> Operation:
    return Operation(
        summary,
        response,
        request,
        MODEL_ERRORS,
        error_body,
        authenticated=True,
        deadline=True,
    )


def _model_route(
    path: str,
    name: str,
    endpoint: Endpoint,
    parts: PathParts,
    auth: str = TENANT_KEY,
    render_error: Callable[[HeadwayError], Response] | None = None,
) -> Route:
    """A route of the request path: a tenant's key (or ``auth``) and a JSON body, both
    checked before the body is read."""

    async def handle(request: Request) -> Response:
        return await serve(request, endpoint, parts)

    return Route(
        "POST",
        path,
        name,
        handle,
        render_error=render_error,
        auth=auth,
        accepts=check_media_type,
    )


def compat_routes(
    service: GatewayService,
    parts: PathParts,
    embed_models: Sequence[str],
    rerank_models: Sequence[str],
) -> list[DocumentedRoute]:
    """Cohere v2 (``endpoints/cohere_v2.py``) and TEI (``endpoints/tei.py``): their bodies,
    answers and (TEI) error format; auth, quota, admission, deadline, fan-out and usage as
    on every model route."""
    tei_embed = tei.TeiEmbed(embed_models)
    embed_doc = _model_operation(
        "Embed texts (TEI-compatible)",
        compat.TeiEmbedRequest,
        list[list[float]],
        compat.TeiError,
    )
    info = tei.InfoParts(
        service.snapshots, service.pools, tuple(embed_models), parts.settings.limits
    )
    return [
        DocumentedRoute(
            _model_route("/v2/embed", "cohere_embed", CohereEmbed(), parts),
            _model_operation(
                "Embed texts (Cohere v2-compatible)",
                compat.CohereEmbedRequest,
                compat.CohereEmbedResponse,
            ),
        ),
        DocumentedRoute(
            _model_route("/v2/rerank", "cohere_rerank", CohereRerank(), parts),
            _model_operation(
                "Rerank documents (Cohere v2-compatible)",
                compat.CohereRerankRequest,
                compat.CohereRerankResponse,
            ),
        ),
        DocumentedRoute(
            _model_route("/embed", "tei_embed", tei_embed, parts, render_error=tei.tei_error),
            embed_doc,
        ),
        DocumentedRoute(
            # TEI's compatibility route: huggingface_hub's feature_extraction posts here.
            _model_route("/", "tei_root", tei_embed, parts, render_error=tei.tei_error),
            embed_doc,
        ),
        DocumentedRoute(
            _model_route(
                "/rerank",
                "tei_rerank",
                tei.TeiRerank(rerank_models),
                parts,
                render_error=tei.tei_error,
            ),
            _model_operation(
                "Rerank texts (TEI-compatible)",
                compat.TeiRerankRequest,
                list[compat.TeiRank],
                compat.TeiError,
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/info",
                "tei_info",
                tei.info(info),
                render_error=tei.tei_error,
                auth=ANY_KEY,
            ),
            Operation(
                "The model /embed serves and the limits a request meets (TEI-compatible)",
                compat.TeiInfo,
                errors=(Unauthorized, NotFound),
                error_body=compat.TeiError,
                authenticated=True,
            ),
        ),
    ]


_LINE_BODIES: dict[str, tuple[type[msgspec.Struct], type[msgspec.Struct]]] = {
    "embeddings": (bodies.EmbeddingsRequest, bodies.EmbeddingsResponse),
    "rerank": (bodies.RerankRequest, bodies.RerankResponse),
}
_HEX_ID = {"type": "string", "pattern": "^[0-9a-f]{16,64}$"}
_LINE_HEADERS = [
    {
        "name": LINE_TENANT_ID,
        "in": "header",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TENANT_ID},
        "description": "The id of the tenant the line is run for (its batch's).",
    },
    {
        "name": LINE_KEY_ID,
        "in": "header",
        "required": True,
        "schema": _HEX_ID,
        "description": "The id of the key that created the batch (the usage event names it).",
    },
    {
        "name": LINE_REQUEST_ID,
        "in": "header",
        "required": True,
        "schema": _HEX_ID,
        "description": "The line's own request id, the same on every attempt (billed once).",
    },
    {
        "name": LINE_BATCH_ID,
        "in": "header",
        "required": True,
        "schema": {"type": "string", "pattern": "^batch_[0-9A-Za-z_-]{1,64}$"},
        "description": "The batch the line is of: it must be in_progress, of this tenant and key.",
    },
    {
        "name": LINE_NUMBER,
        "in": "header",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LINE},
        "description": "The line's number in the batch's input (1-based); the request id is its.",
    },
]


def batch_routes(
    batches: BatchParts, endpoints: Sequence[Endpoint], parts: PathParts
) -> list[DocumentedRoute]:
    """The Batch API's, and the executor's: each model endpoint again, for a line run as
    batch work (its body the endpoint's; the executor's token, and headers naming whom it
    runs the line for)."""
    lines = [
        DocumentedRoute(
            _model_route(
                LINE_PATHS[endpoint.route],
                f"batch_{endpoint.route}",
                endpoint,
                parts,
                auth=EXECUTOR_TOKEN,
            ),
            Operation(
                f"One batch line of /v1/{endpoint.route}, run as batch-tier work (the batch "
                "executor's token)",
                _LINE_BODIES[endpoint.route][1],
                _LINE_BODIES[endpoint.route][0],
                errors=(*MODEL_ERRORS, LineNotLive),
                authenticated=True,
                deadline=True,
                headers=_LINE_HEADERS,
            ),
        )
        for endpoint in endpoints
    ]
    store_routes = [*files.routes(batches), *batches_api.routes(batches)]
    return [*(store_guarded(route) for route in store_routes), *lines]


def _openapi(documented: list[DocumentedRoute], service: GatewayService) -> Handler:
    """Built on each call, from ``documented`` as it is then (this route included) and the
    widths of the embedding models served now."""

    async def handle(request: Request) -> Response:
        snapshot = service.snapshots.current
        served = service.pools.served_versions()
        records = [record for record in snapshot.models.values() if record.version in served]
        dimensions = {
            width for record in records if record.kind == "embedding" for width in widths(record)
        }
        token_limit = max((record.max_tokens for record in records), default=0)
        document = openapi_document(
            documented, service.settings.limits, __version__, dimensions, token_limit
        )
        return json_response(document)

    return handle
