"""Hold: a request for a cold pool waits for a replica (``gateway/coldstart.py``).

It comes after parsing (a malformed request fails at once, never waits) and before
resolve, which needs a ready replica to know who serves the version. A pool with a
ready replica costs one attribute read here; only a request that waits opens a span.
A refusal is a value until here: ``held_full`` is shed (``Overloaded``, counted with
reason ``cold_start_full``), ``still_cold`` is ``NoReplicas``, both with ``Retry-After``.
"""

from __future__ import annotations

from headway.errors import NoReplicas, Overloaded
from headway.gateway.coldstart import ColdStart
from headway.gateway.context import RequestContext
from headway.gateway.stages.admit import Shed
from headway.tracing.spans import span


async def hold_for_replica(
    cold: ColdStart | None, ctx: RequestContext, texts: int, shed: Shed
) -> None:
    if cold is None or cold.pool.ready_count:
        return
    name = cold.pool.name
    with span("cold_start", {"headway.pool": name, "headway.texts": texts}):
        refused = await cold.hold(texts, ctx.deadline)
    if refused is None:
        return
    if refused.reason == "held_full":
        shed(name, "cold_start_full")
        raise Overloaded(
            f"model pool {name!r} is starting and holds as many requests as it may; retry later",
            retry_after_s=refused.retry_after_s,
        )
    raise NoReplicas(
        f"model pool {name!r} has no ready replica: none became ready within the request's "
        "deadline",
        retry_after_s=refused.retry_after_s,
    )
