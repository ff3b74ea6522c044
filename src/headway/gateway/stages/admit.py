"""Admission: only the work the pool can finish within the latency budget gets in.

Twice on the path. ``precheck``, before the body is parsed, needs only the
tenant's tier: a full pool refuses in microseconds. ``admitted``, once the texts
are counted, takes a permit for them on the pool that serves the request's model
and releases it when the block ends, however it ends (completed work feeds the
pool's throughput estimate). The decisions are the controller's
(``admission/``); a refusal becomes ``Overloaded`` (503 with ``Retry-After``) here,
and is counted by pool and reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from headway.errors import Overloaded
from headway.gateway.admission.controller import Refusal
from headway.gateway.context import RequestContext
from headway.gateway.pool import ReplicaPool
from headway.registry.model import Tier

Shed = Callable[[str, str], None]
"""Counts a refusal: ``shed(pool, reason)``."""


def precheck(pool: ReplicaPool | None, tier: Tier, shed: Shed) -> None:
    if pool is None:
        return
    refused = pool.admission.precheck(tier)
    if refused is not None:
        raise _overloaded(pool, refused, shed)


@contextmanager
def admitted(pool: ReplicaPool, ctx: RequestContext, texts: int, shed: Shed) -> Iterator[None]:
    outcome = pool.admission.try_admit(ctx.tenant.name, ctx.tenant.tier, texts)
    if isinstance(outcome, Refusal):
        raise _overloaded(pool, outcome, shed)
    completed = False
    try:
        yield
        completed = True
    finally:
        pool.admission.release(outcome, completed=completed)


def _overloaded(pool: ReplicaPool, refused: Refusal, shed: Shed) -> Overloaded:
    shed(pool.name, refused.reason)
    return Overloaded(
        f"model pool {pool.name!r} is at capacity ({refused.reason}); retry later",
        retry_after_s=refused.retry_after_s,
    )
