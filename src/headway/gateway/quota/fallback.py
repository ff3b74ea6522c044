"""Redis buckets while Redis answers; a local share of each quota while it does not.

``FallbackQuotaStore`` delegates to ``RedisQuotaStore``; when that raises
``QuotaStoreUnavailable`` it limits with local buckets at ``share = 1/N`` (N: the configured
``gateways``, else the live count from the last successful ``heartbeat``, at least 1). While
local, at most one request per ``probe_interval_s`` tries Redis first, and the first answered
switches back. Never silently unlimited, never silently ``limit x N``: the warning on entering
local mode names N and its source, and each change is reported to ``on_mode_change``.

**What a tenant can over-spend.** With burst ``b``, rate ``r``, an outage of ``T`` and any window
``W`` containing it, the tenant is granted at most ``b + r x W`` (the contract) plus
``b + min(b, r x T)``: never more than two extra bursts per outage, however long. The N local
buckets (each at most ``b/N``, refilling at ``r/N``, full at first whatever was spent in Redis)
grant at most ``b + r x T``; the untouched Redis bucket refills meanwhile by ``min(b, r x T)``
(or is simply full, if Redis restarted empty: the same bound). The local buckets refill only
while local, so an outage that flaps (a restart whose dead pooled connections fail one after
another) counts once instead of one burst per flip; a later outage finds them as left, less
than a burst: the safe side. Each second a gateway is still local while Redis answers again
(until its next probe, ``probe_interval_s`` after each failure it meets) adds ``r/N``, since
the Redis bucket grants meanwhile too. The bound needs N right: with gateways
added since the last heartbeat the local part scales by ``actual / N``, and a tenant whose
traffic reaches fewer than N gateways gets less than its share, not more.

Refunds never exceed what was taken where it was taken: each tenant has a ledger of texts the
local bucket granted and no refund has repaid. A refund repays it first (into the local bucket
while local; dropped once back on Redis, whose bucket never granted them), and only the rest
goes to Redis, or is dropped while local. Dropping a refund can only under-admit.
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
