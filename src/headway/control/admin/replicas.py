"""The admin route that shows each pool's replicas and routing counts."""

from __future__ import annotations

from typing import Literal

import msgspec

from headway.errors import Forbidden, Unauthorized
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.pools import Pools
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route


class ReplicaState(msgspec.Struct):
    url: str
    state: Literal["ready", "unready", "ejected"]
    model_version: str
    versions: list[str]
    outstanding_texts: int
    latency_ms: float
    consecutive_failures: int
    ejections: int


class PoolRouting(msgspec.Struct):
    hedging: bool
    quantile: float
    latency_quantile_ms: float | None
    chunks: int
    retries: int
    hedges: int
    hedges_won: int


class Replicas(msgspec.Struct):
    """``GET /admin/replicas``: each pool's replicas, and what its chunks cost in attempts."""

    pools: dict[str, list[ReplicaState]]
    routing: dict[str, PoolRouting]


def routes(pools: Pools) -> list[DocumentedRoute]:
    return [
        DocumentedRoute(
            Route("GET", "/admin/replicas", "admin", admin_replicas(pools), auth=ADMIN_KEY),
            Operation(
                "Each pool's replicas and routing counts (admin key)",
                Replicas,
                errors=(Unauthorized, Forbidden),
                authenticated=True,
            ),
        )
    ]


def admin_replicas(pools: Pools) -> Handler:
    async def handle(request: Request) -> Response:
        replicas = {
            pool.name: [
                ReplicaState(
                    url=replica.url,
                    state=pool.state(replica),
                    model_version=replica.model_version,
                    versions=sorted(replica.versions),
                    outstanding_texts=replica.outstanding_texts,
                    latency_ms=round(replica.latency_s * 1000, 2),
                    consecutive_failures=replica.health.consecutive_failures,
                    ejections=replica.health.ejections,
                )
                for replica in pool.replicas
            ]
            for pool in pools
        }
        routing = {
            pool.name: PoolRouting(
                hedging=pool.routing.hedging,
                quantile=pool.routing.hedge_quantile,
                latency_quantile_ms=_ms(pool.latency.value_s()),
                chunks=pool.counts.chunks,
                retries=pool.counts.retries,
                hedges=pool.counts.hedges,
                hedges_won=pool.counts.hedges_won,
            )
            for pool in pools
        }
        return json_response(Replicas(replicas, routing))

    return handle


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
