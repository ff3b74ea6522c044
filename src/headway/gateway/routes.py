"""The data plane's routes, each described once: the model endpoints (OpenAI's, Cohere's,
TEI's, and the executor's batch lines), the models served, health and readiness.

The control plane's are its mounts' (``headway/control/``); the composition root
(``headway/app/build.py``) puts both behind one edge. Answers are the structs in
``schemas`` and ``protocols.bodies``, so the OpenAPI document describes what is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from headway import wire
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
    ValidationFailed,
)
from headway.gateway import schemas, tokens
from headway.gateway.auth.kinds import ANY_KEY, EXECUTOR_TOKEN, TENANT_KEY
from headway.gateway.endpoints import tei
from headway.gateway.endpoints.base import Endpoint
from headway.gateway.endpoints.cohere_v2 import CohereEmbed, CohereRerank
from headway.gateway.endpoints.embeddings import Embeddings
from headway.gateway.endpoints.rerank import Rerank
from headway.gateway.lines.headers import OPENAPI_HEADERS
from headway.gateway.lines.headers import PATHS as LINE_PATHS
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.path import PathParts, serve
from headway.gateway.pools import Pools
from headway.gateway.service import GatewayService
from headway.gateway.snapshots import Snapshots
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
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


def data_plane_routes(
    service: GatewayService,
    rerank_models: Sequence[str],
    embed_models: Sequence[str] = (),
    *,
    lines: bool = False,
) -> list[DocumentedRoute]:
    """``rerank_models``: what serves a rerank request that names no model, in order;
    ``embed_models``: what serves an embedding request that names no model (TEI's), in
    order (empty: the last of ``rerank_models``); ``lines``: the executor's batch-line
    routes too."""
    parts = service.parts()
    snapshots, pools = service.snapshots, service.pools
    embeddings, rerank = Embeddings(), Rerank(rerank_models)
    return [
        DocumentedRoute(
            model_route("/v1/embeddings", "embeddings", embeddings, parts),
            model_operation(
                "Create embeddings (OpenAI-compatible)",
                bodies.EmbeddingsRequest,
                bodies.EmbeddingsResponse,
            ),
        ),
        DocumentedRoute(
            model_route("/v1/rerank", "rerank", rerank, parts),
            model_operation(
                "Rerank documents (Cohere v1-compatible)",
                bodies.RerankRequest,
                bodies.RerankResponse,
            ),
        ),
        # Other APIs' clients, unchanged: each route a translation onto the same path.
        *compat_routes(service, parts, embed_models or rerank_models[-1:], rerank_models),
        *(line_routes((embeddings, rerank), parts) if lines else []),
        DocumentedRoute(
            Route("GET", "/v1/models", "models", list_models(snapshots, pools), auth=ANY_KEY),
            Operation(
                "Models being served, by every name they answer to",
                schemas.ModelList,
                errors=(Unauthorized,),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("GET", "/healthz", "healthz", healthz),
            Operation("The process is up", schemas.Health),
        ),
        DocumentedRoute(
            Route("GET", "/readyz", "readyz", readyz(service)),
            Operation(
                "Ready to serve: every pool has a ready replica (or is cold, and its requests "
                "wait for one) and the gateway is not draining",
                schemas.Readiness,
                other_answers={503: schemas.Readiness},
            ),
        ),
    ]


def model_operation(
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


def model_route(
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
    embed_doc = model_operation(
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
            model_route("/v2/embed", "cohere_embed", CohereEmbed(), parts),
            model_operation(
                "Embed texts (Cohere v2-compatible)",
                compat.CohereEmbedRequest,
                compat.CohereEmbedResponse,
            ),
        ),
        DocumentedRoute(
            model_route("/v2/rerank", "cohere_rerank", CohereRerank(), parts),
            model_operation(
                "Rerank documents (Cohere v2-compatible)",
                compat.CohereRerankRequest,
                compat.CohereRerankResponse,
            ),
        ),
        DocumentedRoute(
            model_route("/embed", "tei_embed", tei_embed, parts, render_error=tei.tei_error),
            embed_doc,
        ),
        DocumentedRoute(
            # TEI's compatibility route: huggingface_hub's feature_extraction posts here.
            model_route("/", "tei_root", tei_embed, parts, render_error=tei.tei_error),
            embed_doc,
        ),
        DocumentedRoute(
            model_route(
                "/rerank",
                "tei_rerank",
                tei.TeiRerank(rerank_models),
                parts,
                render_error=tei.tei_error,
            ),
            model_operation(
                "Rerank texts (TEI-compatible)",
                compat.TeiRerankRequest,
                list[compat.TeiRank],
                compat.TeiError,
            ),
        ),
        *_token_routes(parts, embed_models),
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


def _token_routes(parts: PathParts, embed_models: Sequence[str]) -> list[DocumentedRoute]:
    """TEI's ``/tokenize`` and ``/decode`` (``gateway/tokens.py``)."""
    table = (
        (
            "/tokenize",
            tokens.tokenize,
            "Split texts into the model's tokens, untruncated (TEI-compatible)",
            list[list[wire.Token]],
            compat.TeiTokenizeRequest,
        ),
        (
            "/decode",
            tokens.decode_ids,
            "Turn token ids back into text (TEI-compatible)",
            list[str],
            compat.TeiDecodeRequest,
        ),
    )
    return [
        DocumentedRoute(
            Route(
                "POST",
                path,
                f"tei_{path[1:]}",
                handler(parts, embed_models),
                render_error=tei.tei_error,
                auth=TENANT_KEY,
                accepts=check_media_type,
            ),
            Operation(
                summary,
                answer,
                body,
                errors=MODEL_ERRORS,
                error_body=compat.TeiError,
                authenticated=True,
                deadline=True,
            ),
        )
        for path, handler, summary, answer, body in table
    ]


_LINE_BODIES: dict[str, tuple[type[msgspec.Struct], type[msgspec.Struct]]] = {
    "embeddings": (bodies.EmbeddingsRequest, bodies.EmbeddingsResponse),
    "rerank": (bodies.RerankRequest, bodies.RerankResponse),
}


def line_routes(endpoints: Sequence[Endpoint], parts: PathParts) -> list[DocumentedRoute]:
    """The executor's: each model endpoint again, for a line run as batch work (its body
    the endpoint's; the executor's token, and headers naming whom it runs the line for)."""
    return [
        DocumentedRoute(
            model_route(
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
                headers=OPENAPI_HEADERS,
            ),
        )
        for endpoint in endpoints
    ]


def list_models(snapshots: Snapshots, pools: Pools) -> Handler:
    async def handle(request: Request) -> Response:
        snapshot = snapshots.current  # the key was checked by the edge (auth any_key)
        served = pools.served_versions()
        data = [
            schemas.ModelEntry(name, record.version, record.kind, record.dimensions)
            for name, record in sorted(snapshot.models.items())
            if record.version in served
        ]
        return json_response(schemas.ModelList(data))

    return handle


async def healthz(request: Request) -> Response:
    return json_response(schemas.Health("ok"))


def readyz(service: GatewayService) -> Handler:
    async def handle(request: Request) -> Response:
        pools = {
            pool.name: schemas.PoolReadiness(pool.ready_count, len(pool.replicas))
            for pool in service.pools
        }
        ready = service.ready
        return json_response(schemas.Readiness(ready, pools), 200 if ready else 503)

    return handle
