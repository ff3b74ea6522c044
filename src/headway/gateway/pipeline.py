"""The steps every model request takes, in order, shared by the endpoints.

``begin``: media type → key → tenant → deadline from the tier's timeouts →
the cheap admission check, all before the body is parsed, so a full pool
refuses in microseconds. ``run_chunks``: charge the tenant's quota for the
request's texts (429 when the bucket is short), admit them on the pool that
serves its model, fan the chunks out in parallel, release the permit whatever
happens (completed work feeds the throughput estimate). Texts charged for work
that then fails on our side (shed, 5xx, our deadline) are refunded; a client's
own mistakes and completed work are not.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from headway.errors import HeadwayError, Overloaded, QuotaExceeded
from headway.gateway.admission.controller import Refusal
from headway.gateway.auth import authenticate, require_tenant
from headway.gateway.call import Call
from headway.gateway.deadline import Deadline, deadline_from_headers
from headway.gateway.dispatch import BodyForBudget, call_chunk, gather_or_cancel
from headway.gateway.fanout import split
from headway.gateway.pool import ReplicaPool, Spread
from headway.gateway.quota.store import Quota
from headway.gateway.service import GatewayService
from headway.gateway.validation import check_media_type
from headway.registry.model import Tier
from headway.worker import protocol

ChunkBody = Callable[[slice, float], bytes]


def begin(service: GatewayService, call: Call, route_pool: ReplicaPool | None) -> Deadline:
    headers = call.request.headers
    check_media_type(headers)
    tenant = require_tenant(authenticate(headers, service.snapshot))
    call.tenant, call.tier = tenant.name, tenant.tier
    if service.settings.quota.enabled:
        call.quota = Quota(tenant.name, tenant.rate_texts_per_s, tenant.burst_texts)
    timeouts = getattr(service.settings, tenant.tier)
    deadline = deadline_from_headers(
        headers, default_ms=timeouts.default_ms, max_ms=timeouts.max_ms, clock=service.clock
    )
    if route_pool is not None:
        refused = route_pool.admission.precheck(tenant.tier)
        if refused is not None:
            raise _overloaded(service, route_pool, refused)
    return deadline


def priority(tier: Tier) -> int:
    return protocol.PRIORITY_BATCH if tier == "batch" else protocol.PRIORITY_INTERACTIVE


def _bind(body_for: ChunkBody, part: slice) -> BodyForBudget:
    return lambda budget_ms: body_for(part, budget_ms)


async def run_chunks(
    service: GatewayService,
    call: Call,
    pool: ReplicaPool,
    path: str,
    n_texts: int,
    body_for: ChunkBody,
    deadline: Deadline,
    version: str,
) -> list[protocol.ChunkResult]:
    await _charge(service, call, n_texts)
    try:
        outcome = pool.admission.try_admit(call.tenant, call.tier, n_texts)
        if isinstance(outcome, Refusal):
            raise _overloaded(service, pool, outcome)
        completed = False
        spread = Spread()
        try:
            results = await gather_or_cancel(
                [
                    call_chunk(
                        pool,
                        service.transport,
                        path,
                        _bind(body_for, part),
                        part.stop - part.start,
                        deadline,
                        version,
                        spread,
                    )
                    for part in split(n_texts, service.settings.chunk_texts)
                ]
            )
            completed = True
            return results
        finally:
            pool.admission.release(outcome, completed=completed)
    except HeadwayError as exc:
        if call.quota is not None and exc.status >= 500:
            await service.quota.refund(call.quota, n_texts)
        raise


async def _charge(service: GatewayService, call: Call, n_texts: int) -> None:
    if call.quota is None:
        return
    taken = await service.quota.take(call.quota, n_texts)
    call.headers.update(
        {
            "x-ratelimit-limit": f"{taken.limit:g}",
            "x-ratelimit-remaining": str(int(taken.remaining)),
            "x-ratelimit-reset": str(math.ceil(taken.reset_s)),
        }
    )
    if taken.granted:
        return
    if taken.retry_after_s == math.inf:
        raise QuotaExceeded(
            f"a request of {n_texts} texts is larger than the tenant's burst of "
            f"{call.quota.burst:g} texts; split it"
        )
    raise QuotaExceeded(
        f"quota of {call.quota.rate:g} texts/s (burst {call.quota.burst:g}) used up; retry later",
        retry_after_s=taken.retry_after_s,
    )


def _overloaded(service: GatewayService, pool: ReplicaPool, refused: Refusal) -> Overloaded:
    service.metrics.shed.labels(pool.name, refused.reason).inc()
    return Overloaded(
        f"model pool {pool.name!r} is at capacity ({refused.reason}); retry later",
        retry_after_s=refused.retry_after_s,
    )
