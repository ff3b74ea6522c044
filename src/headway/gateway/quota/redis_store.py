"""Buckets in Redis, shared by every gateway: one Lua script per operation.

Each script reads Redis ``TIME``, refills, and checks-and-takes in one atomic step, so gateways
with skewed clocks agree and two gateways never both spend the last token. The arithmetic is
``bucket.take`` / ``bucket.refund``'s (floats); a bucket is the hash ``{key_prefix}{tenant_id}``
of ``tokens`` and ``updated`` (Redis time in microseconds), and one idle long enough to be full
again expires, so idle tenants cost no memory. Buckets are the tenant id's, so a tenant created
with a deleted one's name starts full.

``heartbeat`` records this gateway beside the buckets, in a sorted set scored by Redis time,
drops members older than the TTL and answers how many are live: the N by which
``FallbackQuotaStore`` splits a quota when Redis goes away.

Every Redis failure (refused, timed out, protocol; ``OOM`` when a ``noeviction`` instance is
full) is raised as ``QuotaStoreUnavailable``; a refusal is a value, not an exception. So is an
instance that could forget buckets (``redis_layout``): once ``check_layout`` has found one,
every take and refund raises without asking Redis until a later check finds it safe, and the
fallback limits locally, as during an outage.
"""

from __future__ import annotations

import math

from headway import redis_client
from headway.gateway.quota.store import Quota, QuotaDecision, QuotaStoreUnavailable, decision
from headway.redis_client import REDIS_FAILURES, RedisEndpoint
from headway.redis_layout import quota_layout_problem

# Redis >= 5 replicates a script's effects, which a script calling TIME needs;
# REDIS_VERSION_NUM exists from 7.0, where replicate_commands is deprecated.
_PRELUDE = """
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local fields = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = burst
if fields[1] and fields[2] then
  local elapsed = math.max(0, now - tonumber(fields[2])) / 1000000
  tokens = math.min(burst, tonumber(fields[1]) + elapsed * rate)
end
"""

# Answers {granted (0|1), remaining, retry_after_s (-1: never)} as strings,
# since Redis truncates Lua numbers to integers.
_TAKE = (
    _PRELUDE
    + """
local granted = 0
local wait = 0
if cost <= tokens then
  tokens = tokens - cost
  granted = 1
elseif cost <= burst then
  wait = (cost - tokens) / rate
else
  wait = -1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'updated', now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {granted, string.format('%.17g', tokens), string.format('%.17g', wait)}
"""
)

# Refunding a bucket that has expired (or was never taken from) changes nothing:
# it would read as full anyway.
_REFUND = (
    _PRELUDE
    + """
if not fields[1] then return 0 end
tokens = math.min(burst, tokens + cost)
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'updated', now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""
)

_HEARTBEAT = """
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%.6f', now), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.6f', now - ttl))
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * ttl * 1000))
return redis.call('ZCARD', KEYS[1])
"""


def idle_ttl_ms(quota: Quota) -> int:
    """How long an untouched bucket is kept: twice the time to refill from empty, plus 1 s."""
    return math.ceil((2.0 * quota.burst / quota.rate + 1.0) * 1000.0)


class RedisQuotaStore:
    """Token buckets in Redis, checked and taken atomically by Lua scripts on Redis time."""

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        *,
        timeout_s: float = 0.25,
        key_prefix: str = "headway:quota:id:",
        gateways_key: str = "headway:gateways",
    ) -> None:
        self._redis = redis_client.connect(endpoint, timeout_s)
        self._unsafe: str | None = None
        """Set while the instance could lose buckets: why."""
        self._key_prefix = key_prefix
        self._gateways_key = gateways_key
        self._take = self._redis.register_script(_TAKE)
        self._refund = self._redis.register_script(_REFUND)
        self._heartbeat = self._redis.register_script(_HEARTBEAT)

    def key(self, tenant_id: int) -> str:
        return f"{self._key_prefix}{tenant_id}"

    async def check_layout(self, cache: RedisEndpoint | None) -> str | None:
        """Whether this instance could forget a bucket (``redis_layout``): the reason, or
        None; until a later check answers None every take and refund is refused."""
        try:
            self._unsafe = await quota_layout_problem(self._redis, cache)
        except REDIS_FAILURES as exc:
            raise QuotaStoreUnavailable(f"quota layout check failed: {exc}") from exc
        return self._unsafe

    def _refuse_if_unsafe(self) -> None:
        if self._unsafe is not None:
            raise QuotaStoreUnavailable(self._unsafe)

    async def take(self, quota: Quota, cost: float) -> QuotaDecision:
        self._refuse_if_unsafe()
        args = [float(quota.rate), float(quota.burst), float(cost), idle_ttl_ms(quota)]
        try:
            granted, remaining, wait = await self._take(keys=[self.key(quota.tenant_id)], args=args)
        except REDIS_FAILURES as exc:
            raise QuotaStoreUnavailable(f"quota take failed: {exc}") from exc
        retry_after_s = float(wait)
        if retry_after_s < 0:
            retry_after_s = float("inf")
        return decision(quota, granted == 1, float(remaining), retry_after_s)

    async def refund(self, quota: Quota, cost: float) -> None:
        self._refuse_if_unsafe()
        args = [float(quota.rate), float(quota.burst), float(cost), idle_ttl_ms(quota)]
        try:
            await self._refund(keys=[self.key(quota.tenant_id)], args=args)
        except REDIS_FAILURES as exc:
            raise QuotaStoreUnavailable(f"quota refund failed: {exc}") from exc

    async def heartbeat(self, gateway_id: str, ttl_s: float) -> int:
        """Record ``gateway_id`` as live now; answer how many gateways beat within ``ttl_s``."""
        try:
            live = await self._heartbeat(keys=[self._gateways_key], args=[gateway_id, float(ttl_s)])
        except REDIS_FAILURES as exc:
            raise QuotaStoreUnavailable(f"gateway heartbeat failed: {exc}") from exc
        return int(live)

    async def close(self) -> None:
        await self._redis.aclose()
