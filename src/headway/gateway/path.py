"""The request path of a model request (``/v1/embeddings``, ``/v1/rerank``, and the same work
asked in Cohere v2's and TEI's words: ``endpoints/work.py``), in order.

Outside it, the edge (``http/edge.py``) has already given the request its id and
found its route, and, from the headers alone, before reading the body:

    identify     the bearer key → the tenant (or, on the batch          gateway/auth/checks.py
                 executor's routes, the tenant it runs a line for),     (the route's auth)
                 through the failed-key limiter: 401 / 403 / 429        gateway/auth/limiter.py
    media type   the body is declared as JSON: 415                      protocols/parse.py
    length       a declared Content-Length past the limit: 413          http/asgi.py

then read the body; it turns whatever this raises into the answer and counts it. Then,
top to bottom, one line each in ``serve``:

    caller       what identify found (``request.caller``)                stages/authenticate.py
    deadline     X-Timeout-Ms, within the tier's default and maximum   stages/deadline.py
    precheck     a full pool refuses here, before the body is parsed   stages/admit.py
                 (unless the cache may answer), and so do a tenant     stages/quota.py
                 whose bucket is known to be empty and a full usage    stages/meter.py
                 outbox
    parse        strict decoding and limits → the endpoint's request   endpoints/*.py
    hold         a cold pool (scaled to zero, starting): wait for a     stages/hold.py
                 ready replica, within the deadline
    resolve      model name → the version that serves it (split, pin,    stages/resolve.py
                 stickiness), its pool, and maybe a shadow version
    meter        a usage event for the work from here on               stages/meter.py
    quota        the tenant's bucket is charged for the texts          stages/quota.py
    cache        texts this version computed before are found; only    stages/cache.py
                 the misses go on (none: straight to the answer)
    admit        a permit for the missed texts on that pool            stages/admit.py
    shadow       a copy to the shadow version, if any, never awaited   stages/shadow.py
    plan         balanced chunks, each a wire message                  stages/plan.py
    dispatch     route, retry, hedge every chunk within the deadline   stages/dispatch.py
    merge        the chunks' results in request order, and the cache's stages/merge.py
                 rows among them (new rows are stored)                 stages/cache.py
    served       counted per tenant                                    gateway/metrics.py
    usage event  durable (outbox fsynced) before the answer            stages/meter.py
    respond      the endpoint's JSON answer                            endpoints/*.py

Authentication comes before the body is read, and the precheck before it is parsed,
so that a stranger costs its headers and a full pool microseconds, not a JSON decode.
Quota, then admission: a request the tenant may not send never takes a permit; one it
may send but the pool cannot take is refused (and its texts refunded). The version is chosen once,
in resolve, and every chunk goes to it; the shadow copy leaves beside dispatch and
is handed the primary's answer to compare with, never awaited. The cache answers
after the quota (a cached text is charged and billed like a computed one) and
before admission (a hit takes no permit); while the cache may answer a tenant (it
answered that tenant a whole request within the last second), the pool's precheck is
skipped for that tenant, since a full pool can still serve every text it has seen. A
refusal by admission leaves no usage event: no work was done (the texts are refunded). A
request the cache answered whole is not counted for the version's rollout analysis
(it says nothing about the model). A request for a cold pool waits in hold: after
parsing (a malformed request never waits), before resolve (choosing the version needs
a ready replica) and so before the quota and admission (one that gives up was never
charged, and admission sees it only once the pool has a replica).

Every request is counted once more than the edge counts it, by route, tenant, tier,
version and outcome (``GatewayMetrics.model_answered``): the RED metrics of a model.
The stages that wait or decide are spans of the request's trace (``tracing.spans``):
authenticate, quota, cache (when it is on), admit, each chunk attempt (a CLIENT span)
and the usage event; when the trace is not recorded each costs a context-variable read.
Parsing, planning and merging are not: a span would cost more than they do.

Each stage is a function of its own module with small typed inputs, and gets only
the parts of the gateway it uses (``PathParts``), never the whole service.
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
            precheck(parts.pools.for_route(endpoint.route), tier, parts.metrics.refused)
        if parts.quota is not None:
            parts.empty_buckets.check(ctx)
        check_meter(parts.meter.sink)
        work = endpoint.parse(request.body, settings.limits)
        cold = parts.cold_starts.for_route(endpoint.route)
        await hold_for_replica(cold, ctx, work.texts, parts.metrics.refused)
        target = resolve(work.models, snapshot, parts.pools, tenant_name, work.user)
        version = target.record.version
        work.check(target.record)
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
