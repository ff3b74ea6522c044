"""Heavy cache traffic evicts no quota bucket: the two-instance layout, and the old one.

The traffic goes through the real cache path (``ResultsCache.from_settings`` and its
``put_many``, which writes both tiers) until the cache's Redis has evicted many times
what it holds: a condition polled with a deadline, so a slow machine sends the same
pressure later, not less of it. In the layout of settings (quota instance ``noeviction``,
cache instance ``allkeys-lru``) every bucket is still there, byte for byte. In the old
layout (one ``allkeys-lru`` instance for both) the same traffic evicts buckets: the test
above can fail.
"""

from __future__ import annotations

import hashlib
import time

import redis.asyncio as aioredis

from headway.cache.entry import Entry
from headway.cache.metrics import CacheMetrics
from headway.cache.redis_tier import RedisCache
from headway.cache.results import ResultsCache
from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import Quota
from headway.settings import Settings
from headway_tools.testing.redis_server import RedisServer

TENANTS = 200
# Barely refilling and long-lived (idle TTL weeks): nothing but eviction removes one.
QUOTAS = [Quota(tenant_id, rate=0.001, burst=1000.0) for tenant_id in range(1, TENANTS + 1)]
VALUE = Entry(b"\x01" * (384 * 4), tokens=12)  # one MiniLM embedding
BATCH = 256
CACHE_MAXMEMORY = "4mb"
EVICTIONS_WANTED = 20_000  # about ten times what 4 MB of these entries is
DEADLINE_S = 120.0


async def charge_every_tenant(store: RedisQuotaStore) -> None:
    for quota in QUOTAS:
        assert (await store.take(quota, 7)).granted


async def buckets(client: aioredis.Redis) -> dict[str, dict[bytes, bytes]]:
    found = {}
    for quota in QUOTAS:
        key = f"headway:quota:id:{quota.tenant_id}"
        state = await client.hgetall(key)
        if state:
            found[key] = state
    return found


async def evicted_keys(client: aioredis.Redis) -> int:
    return int((await client.info("stats"))["evicted_keys"])


async def flood(put_many: ResultsCache | RedisCache, cache_redis: aioredis.Redis) -> int:
    """Put fresh entries until the cache's Redis has evicted ``EVICTIONS_WANTED`` keys; how
    many were offered (a put the tier skipped while failing counts too)."""
    deadline = time.monotonic() + DEADLINE_S
    written = 0
    while await evicted_keys(cache_redis) < EVICTIONS_WANTED:
        assert time.monotonic() < deadline, "the cache's Redis never came under pressure"
        items = [
            (hashlib.sha256(f"text {written + index}".encode()).digest(), VALUE)
            for index in range(BATCH)
        ]
        await put_many.put_many("t:1", items)
        written += BATCH
    return written


async def test_cache_traffic_evicts_no_bucket_from_the_quota_instance() -> None:
    with (
        RedisServer(maxmemory="16mb", maxmemory_policy="noeviction") as quota_server,
        RedisServer(maxmemory=CACHE_MAXMEMORY, maxmemory_policy="allkeys-lru") as cache_server,
    ):
        settings = Settings(
            redis_url=quota_server.url,
            redis={"cache_url": cache_server.url},
            gateway={"cache": {"memory_bytes": 1 << 20}},
        )
        quota_redis = aioredis.Redis.from_url(quota_server.url)
        cache_redis = aioredis.Redis.from_url(cache_server.url)
        store = RedisQuotaStore(quota_server.url)
        cache = ResultsCache.from_settings(settings, CacheMetrics())
        try:
            assert cache.shared is not None  # (a put that timed out is retried by flood)
            await charge_every_tenant(store)
            before = await buckets(quota_redis)
            assert len(before) == TENANTS
            # 20,000 evictions of 1.5 KiB entries: about 30 MiB through a 4 MiB cache.
            await flood(cache, cache_redis)
            assert await buckets(quota_redis) == before  # every bucket, unchanged
            assert await evicted_keys(quota_redis) == 0
            # And the buckets still count: a tenant's next take starts from its level.
            after = await store.take(QUOTAS[0], 1)
            assert after.remaining < QUOTAS[0].burst - 7
        finally:
            await cache.close()
            await store.close()
            await quota_redis.aclose()
            await cache_redis.aclose()


async def test_in_the_old_single_instance_layout_the_same_traffic_evicts_buckets() -> None:
    with RedisServer(maxmemory=CACHE_MAXMEMORY, maxmemory_policy="allkeys-lru") as server:
        client = aioredis.Redis.from_url(server.url)
        store = RedisQuotaStore(server.url)
        # What from_settings built from redis_url alone before the instances were split.
        cache = RedisCache(server.url, ttl_s=3600)
        try:
            await charge_every_tenant(store)
            assert len(await buckets(client)) == TENANTS
            await flood(cache, client)
            assert len(await buckets(client)) < TENANTS  # forgotten buckets: full ones
        finally:
            await cache.close()
            await store.close()
            await client.aclose()
