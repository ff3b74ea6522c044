"""The request path of a model request (``/v1/embeddings``, ``/v1/rerank``), in order.

Outside it, the edge (``http/edge.py``) has already given the request its id,
found its route and read its body; it turns whatever this raises into the answer
and counts it. Then, top to bottom, one line each in ``serve``:

    media type   the body is declared as JSON                          stages/parse.py
    authenticate the bearer key → the tenant                           stages/authenticate.py
    deadline     X-Timeout-Ms, within the tier's default and maximum   stages/deadline.py
    precheck     a full pool refuses here, before the body is parsed   stages/admit.py
                 and so does a full usage outbox                       stages/meter.py
    parse        strict decoding and limits → the endpoint's request   endpoints/*.py
    resolve      model name → the version that serves it (split, pin,    stages/resolve.py
                 stickiness), its pool, and maybe a shadow version
    meter        a usage event for the work from here on               stages/meter.py
    quota        the tenant's bucket is charged for the texts          stages/quota.py
    admit        a permit for the texts on that pool                   stages/admit.py
    shadow       a copy to the shadow version, if any, never awaited   stages/shadow.py
    plan         balanced chunks, each a wire message                  stages/plan.py
    dispatch     route, retry, hedge every chunk within the deadline   stages/dispatch.py
    merge        the chunks' results in request order                  stages/merge.py
    served       counted per tenant                                    gateway/metrics.py
    usage event  durable (outbox fsynced) before the answer            stages/meter.py
    respond      the endpoint's JSON answer                            endpoints/*.py

Authentication and the precheck come before the body is parsed so that a stranger
or a full pool costs microseconds, not a JSON decode. Quota, then admission: a
request the tenant may not send never takes a permit; one it may send but the
pool cannot take is refused (and its texts refunded). The version is chosen once,
in resolve, and every chunk goes to it; the shadow copy leaves beside dispatch and
is handed the primary's answer to compare with, never awaited. The stages the next
features add have their places: a cache look-up goes between admit and plan (only
misses are planned); a tracing span wraps each line.

Each stage is a function of its own module with small typed inputs, and gets only
the parts of the gateway it uses (``PathParts``), never the whole service.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headway.gateway.context import RequestContext
from headway.gateway.endpoints.base import Endpoint
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.pools import Pools
from headway.gateway.quota.store import QuotaStore
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.admit import AdmissionPermit, precheck
from headway.gateway.stages.authenticate import authenticate, require_tenant
from headway.gateway.stages.deadline import deadline_from_headers
from headway.gateway.stages.dispatch import dispatch
from headway.gateway.stages.merge import merge
from headway.gateway.stages.meter import MeterParts, UsageMeter, check_meter
from headway.gateway.stages.parse import check_media_type
from headway.gateway.stages.plan import plan
from headway.gateway.stages.quota import QuotaCharge
from headway.gateway.stages.resolve import resolve
from headway.gateway.stages.shadow import Shadows
from headway.http.asgi import Request, Response
from headway.settings import GatewaySettings


@dataclass(frozen=True, slots=True)
class PathParts:
    """What the request path reads; each stage is handed the one or two it uses."""

    settings: GatewaySettings
    snapshots: Snapshots
    pools: Pools
    quota: QuotaStore | None
    """None: quotas are off."""
    metrics: GatewayMetrics
    clock: Callable[[], float]
    meter: MeterParts
    shadows: Shadows


async def serve(request: Request, endpoint: Endpoint, parts: PathParts) -> Response:
    settings = parts.settings
    started = parts.clock()
    check_media_type(request.headers)
    snapshot = parts.snapshots.current
    principal = authenticate(request.headers, snapshot)
    tenant = require_tenant(principal)
    request.tenant = tenant.name
    timeouts = settings.interactive if tenant.tier == "interactive" else settings.batch
    deadline = deadline_from_headers(request.headers, timeouts, parts.clock)
    ctx = RequestContext(request.id, endpoint.route, tenant, deadline, request.response_headers)
    precheck(parts.pools.for_route(endpoint.route), tenant.tier, parts.metrics.refused)
    check_meter(parts.meter.sink)
    work = endpoint.parse(request.body, settings.limits)
    target = resolve(work.models, snapshot, parts.pools, tenant.name, work.user)
    work.check(target.record)
    async with UsageMeter(parts.meter, ctx, principal.key_id, target, work.texts, started) as meter:
        async with QuotaCharge(parts.quota, ctx, work.texts):
            with AdmissionPermit(target.pool, ctx, work.texts, parts.metrics.refused):
                primary = parts.shadows.start(work, ctx, target)
                try:
                    chunks = plan(work, ctx, target.record.version, settings.chunk_texts)
                    merged = merge(await dispatch(chunks, target.pool, deadline))
                except BaseException:
                    if primary is not None:
                        primary.cancel()  # the copy has nothing to be compared with
                    raise
                if primary is not None:
                    primary.set_result(merged)
        parts.metrics.served(endpoint.route, tenant.name, work.texts)
        await meter.served(merged)
    return work.respond(merged, ctx, target.record)
