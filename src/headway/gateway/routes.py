"""The gateway's routes other than the model endpoints: models, replicas, health, readiness.

Each is built from the parts it reads; answers are the structs in ``schemas``, so
the OpenAPI document describes exactly what is sent.
"""

from __future__ import annotations

from headway.gateway import schemas
from headway.gateway.pools import Pools
from headway.gateway.service import GatewayService
from headway.gateway.snapshots import Snapshots
from headway.http.asgi import Handler, Request, Response, json_response


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


def admin_replicas(snapshots: Snapshots, pools: Pools) -> Handler:
    async def handle(request: Request) -> Response:
        replicas = {
            pool.name: [
                schemas.ReplicaState(
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
            pool.name: schemas.PoolRouting(
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
        return json_response(schemas.Replicas(replicas, routing))

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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
