"""Admission: only the work the pool can finish within the latency budget gets in.

Twice on the path. ``precheck``, before the body is parsed, needs only the
tenant's tier: a full pool refuses in microseconds. ``AdmissionPermit``, once the texts
are counted, takes a permit for them on the pool that serves the request's model
and releases it when the block ends, however it ends (completed work feeds the
pool's throughput estimate). The decisions are the controller's
(``admission/``); a refusal becomes ``Overloaded`` (503 with ``Retry-After``) here,
and is counted by pool and reason.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from headway.errors import Overloaded
from headway.gateway.admission.controller import Refusal
from headway.gateway.context import RequestContext
from headway.gateway.pool import ReplicaPool
from headway.registry.model import Tier
from headway.tracing.spans import span

Shed = Callable[[str, str], None]
"""Counts a refusal: ``shed(pool, reason)``."""


class AdmissionRefused(Overloaded):
    """Admission refused the work before any of it was sent: nothing was done, so the
    usage meter records no event for it (the quota stage refunds its texts)."""


def precheck(pool: ReplicaPool | None, tier: Tier, shed: Shed) -> None:
    if pool is None:
        return
    refused = pool.admission.precheck(tier)
    if refused is not None:
        raise _overloaded(pool, refused, shed)


class AdmissionPermit:
    """``with AdmissionPermit(pool, ctx, texts, shed)``: a permit for ``texts`` on the pool
    for the block, released when it ends, however it ends (a class for the same reason
    as ``QuotaCharge``)."""

    __slots__ = ("_ctx", "_permit", "_pool", "_shed", "_texts")

    def __init__(self, pool: ReplicaPool, ctx: RequestContext, texts: int, shed: Shed) -> None:
        self._pool, self._ctx, self._texts, self._shed = pool, ctx, texts, shed

    def __enter__(self) -> None:
        tenant = self._ctx.tenant
        with span("admit", {"headway.pool": self._pool.name, "headway.texts": self._texts}):
            outcome = self._pool.admission.try_admit(tenant.name, tenant.tier, self._texts)
            if isinstance(outcome, Refusal):
                raise _overloaded(self._pool, outcome, self._shed)
        self._permit = outcome

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pool.admission.release(self._permit, completed=exc is None)


def _overloaded(pool: ReplicaPool, refused: Refusal, shed: Shed) -> AdmissionRefused:
    shed(pool.name, refused.reason)
    return AdmissionRefused(
        f"model pool {pool.name!r} is at capacity ({refused.reason}); retry later",
        retry_after_s=refused.retry_after_s,
    )
