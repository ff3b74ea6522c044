"""Redis buckets while Redis answers; a local share of each quota while it does not.

``FallbackQuotaStore`` delegates to the shared store (``RedisQuotaStore``). When
that raises ``QuotaStoreUnavailable`` the gateway switches to its own local
buckets scaled by ``share = 1/N``, where N is the configured ``gateways`` count or,
if none, the live-gateway count from the last successful ``heartbeat`` (never
below 1). It logs one warning on entering that mode and one info line on leaving
it, and reports each change to ``on_mode_change`` (for a metric). While local, at
most one request per ``probe_interval_s`` tries Redis first; the first one that
gets an answer is served by Redis and switches the gateway back. Never silently
unlimited, never silently ``limit x N``: the warning names N and where it came from.

What a tenant can over-spend. Write ``b`` for burst, ``r`` for rate, ``T`` for
the outage, ``W`` for any window containing it. Each of the N gateways' local
buckets holds at most ``b/N`` and refills at ``r/N``, and starts full whatever the
tenant had spent in Redis, so across the N gateways the local buckets grant at
most ``b + r x T`` during the outage: the quota for those T seconds plus one
extra burst. They refill only while local: a Redis that comes back and goes again
(a restart whose dead pooled connections fail one after another flips a gateway
several times) finds them as they were left, so a flapping outage counts once,
with T the time spent local; otherwise each flip would give another burst. (A later,
separate outage finds them as the last left them too: less than a burst at first,
the safe side.)
Meanwhile the Redis bucket, untouched, refills by ``min(b, r x T)`` that the
tenant can spend after Redis returns; if Redis restarted empty (no
persistence) the bucket is simply full, which is the same bound. Hence over W
the tenant is granted at most ``b + r x W`` (the contract) plus
``b + min(b, r x T)``: never more than two extra bursts per outage, however long
it lasts. This holds if N is right; with a stale N (gateways added since the
last heartbeat) the local part scales by ``actual / N``, and a tenant whose
traffic reaches fewer than N gateways gets less than its share, not more.

Refunds never exceed what was taken where it was taken: each tenant keeps a
ledger of texts granted by the local bucket and not yet refunded. A refund repays
that ledger first (into the local bucket while local, dropped once back on
Redis, whose bucket never granted them) and only the rest goes to Redis; while
local, that rest is dropped. Dropping a refund can only under-admit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, Protocol

from headway.gateway.quota.store import (
    LocalQuotaStore,
    Quota,
    QuotaDecision,
    QuotaStoreUnavailable,
)

logger = logging.getLogger(__name__)

Mode = Literal["redis", "local"]


class SharedQuotaStore(Protocol):
    """A quota store shared by gateways that can also count them (``RedisQuotaStore``)."""

    async def take(self, quota: Quota, cost: float) -> QuotaDecision: ...

    async def refund(self, quota: Quota, cost: float) -> None: ...

    async def heartbeat(self, gateway_id: str, ttl_s: float) -> int: ...

    async def close(self) -> None: ...


class FallbackQuotaStore:
    """The shared store while it answers; ``local`` at a 1/N share while it does not."""

    def __init__(
        self,
        shared: SharedQuotaStore,
        local: LocalQuotaStore,
        *,
        gateways: int | None = None,
        probe_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_mode_change: Callable[[str], None] | None = None,
    ) -> None:
        self._shared = shared
        self._local = local
        self._configured_gateways = gateways
        self._learned_gateways: int | None = None
        self._probe_interval_s = probe_interval_s
        self._clock = clock
        self._on_mode_change = on_mode_change
        self._mode: Mode = "redis"
        self._next_probe_s = 0.0
        self._local_owed: dict[int, float] = {}
        """Per tenant: texts the local bucket granted and no refund has repaid yet."""

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def gateways(self) -> int:
        """N, the number of gateways a quota is split across while local."""
        n = self._configured_gateways or self._learned_gateways or 1
        return max(1, n)

    async def take(self, quota: Quota, cost: float) -> QuotaDecision:
        if self._mode == "local" and self._clock() < self._next_probe_s:
            return await self._take_local(quota, cost)
        # Redis mode, or a due probe: move the next probe first so that concurrent
        # requests do not all probe a dead server.
        self._next_probe_s = self._clock() + self._probe_interval_s
        try:
            outcome = await self._shared.take(quota, cost)
        except QuotaStoreUnavailable as exc:
            self._enter_local(exc)
            return await self._take_local(quota, cost)
        self._enter_redis()
        return outcome

    async def refund(self, quota: Quota, cost: float) -> None:
        owed = self._local_owed.get(quota.tenant_id, 0.0)
        repaid = min(cost, owed)
        if repaid > 0:
            if owed - repaid > 0:
                self._local_owed[quota.tenant_id] = owed - repaid
            else:
                del self._local_owed[quota.tenant_id]
            if self._mode == "local":
                await self._local.refund(quota, repaid)
        rest = cost - repaid
        if rest > 0 and self._mode == "redis":
            try:
                await self._shared.refund(quota, rest)
            except QuotaStoreUnavailable as exc:
                self._enter_local(exc)

    async def heartbeat(self, gateway_id: str, ttl_s: float) -> int | None:
        """Beat through to the shared store and learn N; ``None`` when it is unavailable."""
        try:
            live = await self._shared.heartbeat(gateway_id, ttl_s)
        except QuotaStoreUnavailable:
            return None
        self._learned_gateways = max(1, live)
        self._local.share = 1.0 / self.gateways
        return live

    async def close(self) -> None:
        try:
            await self._shared.close()
        finally:
            await self._local.close()

    async def _take_local(self, quota: Quota, cost: float) -> QuotaDecision:
        outcome = await self._local.take(quota, cost)
        if outcome.granted:
            self._local_owed[quota.tenant_id] = self._local_owed.get(quota.tenant_id, 0.0) + cost
        return outcome

    def _enter_local(self, exc: QuotaStoreUnavailable) -> None:
        self._next_probe_s = self._clock() + self._probe_interval_s
        if self._mode == "local":
            return
        n = self.gateways
        self._local.share = 1.0 / n
        self._local.resume()  # one outage that flaps is still one outage: see above
        self._mode = "local"
        if self._configured_gateways:
            source = "configured"
        elif self._learned_gateways:
            source = "from the last heartbeat"
        else:
            source = "no heartbeat seen: assuming this gateway is alone"
        logger.warning(
            "quota store unavailable (%s); limiting locally at 1/%d of each quota (%s)",
            exc,
            n,
            source,
        )
        if self._on_mode_change is not None:
            self._on_mode_change("local")

    def _enter_redis(self) -> None:
        if self._mode == "redis":
            return
        self._mode = "redis"
        self._local.pause()  # its buckets earn nothing while Redis answers
        logger.info("quota store is back; limiting through Redis again")
        if self._on_mode_change is not None:
            self._on_mode_change("redis")
