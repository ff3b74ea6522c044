"""The gateway's routes, and the edge where every outcome is timed and counted."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from headway import __version__
from headway.errors import DeadlineExceeded, Forbidden, HeadwayError, NoReplicas, Overloaded
from headway.gateway.auth import authenticate
from headway.gateway.call import Call
from headway.gateway.embeddings import create_embeddings
from headway.gateway.openapi import openapi_document
from headway.gateway.rerank import rerank
from headway.gateway.service import GatewayService
from headway.http.asgi import App, Handler, Request, Response, Router, error_response, json_response
from headway.metrics import metrics_handler

log = logging.getLogger(__name__)

Endpoint = Callable[[GatewayService, Call], Awaitable[Response]]


def _instrumented(service: GatewayService, route: str, endpoint: Endpoint) -> Handler:
    """Run an endpoint; turn its error into a JSON response; count and time both.

    Labelled metric children are looked up once per label value, not per request.
    """
    metrics = service.metrics
    latency = metrics.latency.labels(route)
    by_code: dict[int, Any] = {}
    by_failure: dict[str, Any] = {}

    async def handle(request: Request) -> Response:
        started = time.perf_counter()
        call = Call(request)
        try:
            response = await endpoint(service, call)
        except HeadwayError as exc:
            failures = by_failure.get(exc.type)
            if failures is None:
                failures = by_failure[exc.type] = metrics.failures.labels(route, exc.type)
            failures.inc()
            # Shedding, deadlines and an empty pool are counted in metrics (the
            # pool logs its replicas' state changes once); under overload a log
            # line per request would cost more than the refusal. Failures of our
            # own are logged.
            if exc.status >= 500 and not isinstance(
                exc, Overloaded | DeadlineExceeded | NoReplicas
            ):
                log.warning(
                    "%s failed: %s (%s) request_id=%s tenant=%s",
                    route,
                    exc.type,
                    exc.message,
                    call.request_id,
                    call.tenant or "-",
                )
            response = error_response(exc)
        response.headers.update(call.headers)
        response.headers["x-request-id"] = call.request_id
        requests = by_code.get(response.status)
        if requests is None:
            requests = by_code[response.status] = metrics.requests.labels(route, response.status)
        requests.inc()
        latency.observe(time.perf_counter() - started)
        if call.texts:
            metrics.texts.labels(route, call.tenant).inc(call.texts)
        return response

    return handle


def build_gateway_app(service: GatewayService) -> App:
    router = Router()
    openapi = json_response(openapi_document(__version__))

    async def list_models(service: GatewayService, call: Call) -> Response:
        authenticate(call.request.headers, service.snapshot)
        models = service.served_models()
        data = [
            {
                "id": name,
                "object": "model",
                "owned_by": "headway",
                "kind": record.kind,
                "version": record.version,
                "dimensions": record.dimensions,
            }
            for name, record in sorted(service.snapshot.models.items())
            if record in models
        ]
        return json_response({"object": "list", "data": data})

    async def admin_replicas(service: GatewayService, call: Call) -> Response:
        principal = authenticate(call.request.headers, service.snapshot)
        if principal.role != "admin":
            raise Forbidden("an admin key is required")
        pools = {
            name: [
                {
                    "url": replica.url,
                    "state": pool.state(replica),
                    "model_version": replica.model_version,
                    "outstanding_texts": replica.outstanding_texts,
                    "latency_ms": round(replica.latency_s * 1000, 2),
                    "consecutive_failures": replica.health.consecutive_failures,
                    "ejections": replica.health.ejections,
                }
                for replica in pool.replicas
            ]
            for name, pool in service.pools.items()
        }
        routing = {
            name: {
                "hedging": pool.routing.hedging,
                "quantile": pool.routing.hedge_quantile,
                "latency_quantile_ms": _ms(pool.latency.value_s()),
                "chunks": pool.counts.chunks,
                "retries": pool.counts.retries,
                "hedges": pool.counts.hedges,
                "hedges_won": pool.counts.hedges_won,
            }
            for name, pool in service.pools.items()
        }
        return json_response({"pools": pools, "routing": routing})

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        pools = {
            name: {"ready": pool.ready_count, "replicas": len(pool.replicas)}
            for name, pool in service.pools.items()
        }
        return json_response(
            {"ready": service.ready, "pools": pools}, 200 if service.ready else 503
        )

    async def openapi_json(request: Request) -> Response:
        return openapi

    router.add("POST", "/v1/embeddings", _instrumented(service, "embeddings", create_embeddings))
    router.add("POST", "/v1/rerank", _instrumented(service, "rerank", rerank))
    router.add("GET", "/v1/models", _instrumented(service, "models", list_models))
    router.add("GET", "/admin/replicas", _instrumented(service, "admin", admin_replicas))
    router.add("GET", "/healthz", healthz)
    router.add("GET", "/readyz", readyz)
    router.add("GET", "/metrics", metrics_handler(service.metrics.registry))
    router.add("GET", "/openapi.json", openapi_json)
    return App(
        router,
        on_startup=[service.start],
        on_shutdown=[service.stop],
        max_body_bytes=service.settings.limits.max_body_bytes,
        watch_disconnect=True,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
