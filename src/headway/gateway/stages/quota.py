"""The tenant's quota: charged for the request's texts before any work runs.

Every answer from here on carries ``X-RateLimit-Limit`` (the burst),
``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` (seconds until the bucket is
full). Short of texts → 429 with ``Retry-After`` from the refill time, or, for a
request larger than the burst, a 429 that says it can never pass. Texts charged
for work that then fails on our side or is shed after charging are refunded; a
client's own mistakes, its disconnect and completed work are not (``settle.py``).

A tenant whose bucket a charge found empty is remembered (``EmptyBuckets``) until one
text will have refilled, at most ``RECHECK_S``: its next requests are refused in
``check_empty``, before their bodies are parsed, as a full pool refuses them. The
bound keeps the hint from outliving what it cannot see: texts refunded, or a quota
raised, or, with Redis, another gateway's refund. Buckets and hints are the tenant id's,
so a tenant created with a deleted one's name never meets the old one's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import TracebackType

from headway.errors import QuotaExceeded
from headway.gateway.context import RequestContext
from headway.gateway.quota.store import Quota, QuotaDecision, QuotaStore
from headway.gateway.stages.settle import settlement
from headway.tracing.spans import span

RECHECK_S = 1.0


class EmptyBuckets:
    """Tenants whose bucket was found empty, and until when (see the module docstring)."""

    __slots__ = ("_clock", "_empty")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._empty: dict[int, tuple[float, float, float, float]] = {}
        """tenant id → (recheck at, one text back at, full at, burst)."""

    def note(self, quota: Quota, taken: QuotaDecision) -> None:
        """After a charge: an empty bucket is remembered, any other forgotten."""
        if taken.granted or taken.remaining >= 1 or quota.rate <= 0:
            self._empty.pop(quota.tenant_id, None)
            return
        now = self._clock()
        one_text_s = (1 - taken.remaining) / quota.rate
        self._empty[quota.tenant_id] = (
            now + min(one_text_s, RECHECK_S),
            now + one_text_s,
            now + taken.reset_s,
            taken.limit,
        )

    def check(self, ctx: RequestContext) -> None:
        """``QuotaExceeded`` (with the rate-limit headers) if the tenant's bucket is known
        to be empty now."""
        tenant = ctx.tenant
        empty = self._empty.get(tenant.id)
        if empty is None:
            return
        now = self._clock()
        recheck_at, one_text_at, full_at, burst = empty
        if now >= recheck_at:
            del self._empty[tenant.id]
            return
        ctx.response_headers.update(_rate_limit_headers(burst, 0, full_at - now))
        quota = Quota(tenant.id, tenant.rate_texts_per_s, tenant.burst_texts)
        raise _refusal(quota, 1, one_text_at - now)


class QuotaCharge:
    """``async with QuotaCharge(store, ctx, texts)``: charge ``texts`` to the tenant before
    the block runs (``store`` None: quotas are off); refund them if it fails on our side.

    A class, not an ``asynccontextmanager``: this runs on every request, and the
    generator-based form costs several times more to enter and leave."""

    __slots__ = ("_ctx", "_empty", "_quota", "_store", "_texts")

    def __init__(
        self, store: QuotaStore | None, ctx: RequestContext, texts: int, empty: EmptyBuckets
    ) -> None:
        self._store, self._ctx, self._texts, self._empty = store, ctx, texts, empty
        tenant = ctx.tenant
        self._quota = Quota(tenant.id, tenant.rate_texts_per_s, tenant.burst_texts)

    async def __aenter__(self) -> None:
        if self._store is None:
            return
        with span("quota", {"headway.texts": self._texts}) as charged:
            taken = await self._store.take(self._quota, self._texts)
            charged.set("headway.quota.granted", taken.granted)
        self._empty.note(self._quota, taken)
        self._ctx.response_headers.update(
            _rate_limit_headers(taken.limit, taken.remaining, taken.reset_s)
        )
        if not taken.granted:
            raise _refusal(self._quota, self._texts, taken.retry_after_s)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is not None and settlement(exc).refund:
            await self._store.refund(self._quota, self._texts)


def _rate_limit_headers(limit: float, remaining: float, reset_s: float) -> dict[str, str]:
    return {
        "x-ratelimit-limit": f"{limit:g}",
        "x-ratelimit-remaining": str(int(remaining)),
        "x-ratelimit-reset": str(math.ceil(reset_s)),
    }


def _refusal(quota: Quota, texts: int, retry_after_s: float) -> QuotaExceeded:
    if retry_after_s == math.inf:
        return QuotaExceeded(
            f"a request of {texts} texts is larger than the tenant's burst of "
            f"{quota.burst:g} texts; split it"
        )
    return QuotaExceeded(
        f"quota of {quota.rate:g} texts/s (burst {quota.burst:g}) used up; retry later",
        retry_after_s=retry_after_s,
    )
