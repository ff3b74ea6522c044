"""The tenant's quota: charged for the request's texts before any work runs.

Every answer from here on carries ``X-RateLimit-Limit`` (the burst),
``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` (seconds until the bucket is
full). Short of texts → 429 with ``Retry-After`` from the refill time, or, for a
request larger than the burst, a 429 that says it can never pass. Texts charged
for work that then fails on our side (shed after charging, 5xx, our deadline, a
bug) are refunded; a client's own mistakes, its disconnect and completed work
are not.
"""

from __future__ import annotations

import math
from types import TracebackType

from headway.errors import HeadwayError, QuotaExceeded
from headway.gateway.context import RequestContext
from headway.gateway.quota.store import Quota, QuotaStore
from headway.tracing.spans import span


class QuotaCharge:
    """``async with QuotaCharge(store, ctx, texts)``: charge ``texts`` to the tenant before
    the block runs (``store`` None: quotas are off); refund them if it fails on our side.

    A class, not an ``asynccontextmanager``: this runs on every request, and the
    generator-based form costs several times more to enter and leave."""

    __slots__ = ("_ctx", "_quota", "_store", "_texts")

    def __init__(self, store: QuotaStore | None, ctx: RequestContext, texts: int) -> None:
        self._store, self._ctx, self._texts = store, ctx, texts
        tenant = ctx.tenant
        self._quota = Quota(tenant.name, tenant.rate_texts_per_s, tenant.burst_texts)

    async def __aenter__(self) -> None:
        if self._store is None:
            return
        with span("quota", {"headway.texts": self._texts}) as charged:
            taken = await self._store.take(self._quota, self._texts)
            charged.set("headway.quota.granted", taken.granted)
        self._ctx.response_headers.update(
            {
                "x-ratelimit-limit": f"{taken.limit:g}",
                "x-ratelimit-remaining": str(int(taken.remaining)),
                "x-ratelimit-reset": str(math.ceil(taken.reset_s)),
            }
        )
        if not taken.granted:
            raise _refusal(self._quota, self._texts, taken.retry_after_s)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is None or not isinstance(exc, Exception):
            return  # success, or the client left (CancelledError): nothing to give back
        if isinstance(exc, HeadwayError) and exc.status < 500:
            return
        await self._store.refund(self._quota, self._texts)


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
