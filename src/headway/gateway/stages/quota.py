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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from headway.errors import HeadwayError, QuotaExceeded
from headway.gateway.context import RequestContext
from headway.gateway.quota.store import Quota, QuotaStore


@asynccontextmanager
async def charged(store: QuotaStore | None, ctx: RequestContext, texts: int) -> AsyncIterator[None]:
    """Charge ``texts`` to the tenant (``store`` None: quotas are off), for the block's work."""
    if store is None:
        yield
        return
    tenant = ctx.tenant
    quota = Quota(tenant.name, tenant.rate_texts_per_s, tenant.burst_texts)
    taken = await store.take(quota, texts)
    ctx.response_headers.update(
        {
            "x-ratelimit-limit": f"{taken.limit:g}",
            "x-ratelimit-remaining": str(int(taken.remaining)),
            "x-ratelimit-reset": str(math.ceil(taken.reset_s)),
        }
    )
    if not taken.granted:
        raise _refusal(quota, texts, taken.retry_after_s)
    try:
        yield
    except HeadwayError as exc:
        if exc.status >= 500:
            await store.refund(quota, texts)
        raise
    except Exception:
        await store.refund(quota, texts)
        raise


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
