"""The request path of a model request (``/v1/embeddings``, ``/v1/rerank``, and the same work
asked in Cohere v2's and TEI's words: ``endpoints/work.py``), in order.

Before ``serve`` runs, the edge (``http/edge.py``) has identified the caller from the headers
alone, through the failed-key limiter (``gateway/auth/checks.py``: 401 / 403 / 429), refused a
body not declared as JSON (415) or declared too long (413), and read the body; it turns whatever
``serve`` raises into the answer and counts it. ``serve`` then runs the stages of
``gateway/stages/``, one a line, and their order is the rule:

- authentication before the body is read, and the precheck (a full pool, a tenant whose bucket
  is known to be empty, a full usage outbox) before it is parsed: a stranger costs only its
  headers, and a refusal by a full pool no JSON decode;
- hold (a cold pool: wait for a ready replica, within the deadline) after parsing, so a
  malformed request never waits; before resolve, which needs a ready replica; and so before the
  quota and admission: a request that gives up was never charged, and admission sees it only
  once the pool has a replica;
- the version is chosen once, in resolve, and every chunk goes to it;
- quota, then admission: a request the tenant may not send never takes a permit; one the pool
  cannot take has its texts refunded and leaves no usage event (no work was done);
- the cache after the quota (a cached text is charged and billed like a computed one) and
  before admission (a hit takes no permit). While the cache may answer a tenant (it answered
  that tenant a whole request within the last second: ``RequestCache.may_answer``) the precheck
  skips the pool for that tenant: a full pool can still serve every text it has seen;
- the shadow copy leaves beside dispatch and is handed the primary's answer to compare with,
  never awaited;
- the usage event is durable (outbox fsynced) before the answer is sent.

Every request is counted once more than the edge counts it, by route, tenant, tier, version and
outcome (``GatewayMetrics.model_answered``: the RED metrics of a model); one the cache answered
whole does not count for the version's rollout analysis (it says nothing about the model). The
stages that wait or decide are spans of the request's trace (a context-variable read when it is
not recorded); parsing, planning and merging are not, since a span would cost more than they do
(docs/benchmarks.md, "Figures the design rests on").

Each stage is a function of its own module and gets only the parts of the gateway it uses
(``PathParts``), never the whole service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from headway.errors import HeadwayError
from headway.gateway.coldstart import ColdStarts
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.base import Endpoint, ModelRequest
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.pools import Pools
from headway.gateway.quota.store import QuotaStore
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.admit import AdmissionPermit, precheck
from headway.gateway.stages.authenticate import caller_of
from headway.gateway.stages.cache import RequestCache
from headway.gateway.stages.deadline import deadline_from_headers
from headway.gateway.stages.dispatch import dispatch
from headway.gateway.stages.hold import hold_for_replica
from headway.gateway.stages.merge import Merged, merge
from headway.gateway.stages.meter import MeterParts, UsageMeter, check_meter
from headway.gateway.stages.plan import plan
from headway.gateway.stages.quality import watch_quality
from headway.gateway.stages.quota import EmptyBuckets, QuotaCharge
from headway.gateway.stages.resolve import Target, resolve
from headway.gateway.stages.shadow import Shadows
from headway.http.asgi import Request, Response
from headway.http.edge import DISCONNECTED, INTERNAL_ERROR
from headway.quality.monitor import QualityMonitor
from headway.settings import GatewaySettings
from headway.tracing.spans import span


@dataclass(frozen=True, slots=True)
class PathParts:
    """What the request path reads; each stage is handed the one or two it uses."""

    settings: GatewaySettings
    snapshots: Snapshots
    pools: Pools
    quota: QuotaStore | None
    """None: quotas are off."""
    cold_starts: ColdStarts
    metrics: GatewayMetrics
    clock: Callable[[], float]
    meter: MeterParts
    shadows: Shadows
    cache: RequestCache
    quality: QualityMonitor
    empty_buckets: EmptyBuckets
    """Tenants refused before their bodies are parsed: their buckets were found empty."""


async def serve(request: Request, endpoint: Endpoint, parts: PathParts) -> Response:
    """The request path (see the module docstring), counted once by its outcome."""
    settings = parts.settings
    started = parts.clock()
    tenant_name = tier = "none"  # what the metrics say of it, filled in as it is learnt
    version, outcome = "", "ok"
    try:
        snapshot = parts.snapshots.current
        caller = caller_of(request)
        tenant = caller.tenant
        request.tenant = tenant_name = tenant.name
        tier = tenant.tier
        timeouts = settings.interactive if tier == "interactive" else settings.batch
        deadline = deadline_from_headers(request.headers, timeouts, parts.clock)
        ctx = RequestContext(request.id, endpoint.route, tenant, deadline, request.response_headers)
        if not parts.cache.may_answer(tenant):
            precheck(parts.pools.for_route(endpoint.route, snapshot), tier, parts.metrics.refused)
        if parts.quota is not None:
            parts.empty_buckets.check(ctx)
        check_meter(parts.meter.sink)
        work = endpoint.parse(request.body, settings.limits)
        if not parts.pools.ready:  # a pool without a ready replica: is it this one's?
            cold = parts.cold_starts.of(parts.pools.for_models(work.models, snapshot))
            await hold_for_replica(cold, ctx, work.texts, parts.metrics.refused)
        target = resolve(work.models, snapshot, parts.pools, tenant_name, work.user)
        version = target.record.version
        work = work.for_model(target.record)
        async with UsageMeter(parts.meter, ctx, caller, target, work.texts, started) as meter:
            async with QuotaCharge(parts.quota, ctx, work.texts, parts.empty_buckets):
                cached = await parts.cache.look_up(work, tenant, target.record)
                todo = cached.todo
                computed = None if todo is None else await compute(todo, ctx, target, parts)
                merged = parts.cache.complete(cached, computed)
            parts.metrics.served(endpoint.route, tenant_name, work.texts)
            with span("usage_event"):
                await meter.served(merged, model_ran=computed is not None)
        return work.respond(merged, ctx, target.record)
    except HeadwayError as exc:
        outcome = exc.type
        raise
    except asyncio.CancelledError:
        outcome = DISCONNECTED
        raise
    except Exception:
        outcome = INTERNAL_ERROR
        raise
    finally:
        seconds = parts.clock() - started
        parts.metrics.model_answered(endpoint.route, tenant_name, tier, version, outcome, seconds)


async def compute(
    todo: ModelRequest, ctx: RequestContext, target: Target, parts: PathParts
) -> Merged:
    """``todo`` (the texts the cache did not have) on the target's pool: admitted, copied
    to the shadow version, planned, dispatched and merged."""
    with AdmissionPermit(target.pool, ctx, todo.texts, parts.metrics.refused):
        primary = parts.shadows.start(todo, ctx, target)
        try:
            chunks = plan(todo, ctx, target.record.version, parts.settings.chunk_texts)
            merged = merge(await dispatch(chunks, target.pool, ctx.deadline))
            watch_quality(parts.quality, target.record.version, merged)
        except BaseException:
            if primary is not None:
                primary.cancel()  # the copy has nothing to be compared with
            raise
    if primary is not None:
        primary.set_result(merged)
    return merged
