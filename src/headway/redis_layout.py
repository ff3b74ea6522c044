"""Is the quota Redis one that cannot forget a bucket?

A bucket forgotten is a full bucket: the tenant spends its burst again. Redis forgets keys
by eviction, which ``maxmemory-policy`` sets for the whole instance: every policy but
``noeviction`` may drop a bucket (the ``volatile-*`` ones too, since buckets carry a TTL),
and an instance shared with the cache lets cache traffic fill the memory the buckets need.
So the quota instance must run ``noeviction`` and be another server than the cache's
(compared by ``run_id``, which no two running servers share, whatever names reach them).

The policy is read with ``CONFIG GET``, or from ``INFO memory`` where CONFIG is renamed or
denied (managed services, ACL users without ``+config``). ``layout_problem`` is the pure
verdict; ``quota_layout_problem`` asks the servers. Unreachable servers raise (``RedisError``,
``OSError``): that is the quota fallback's business, not a verdict.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from headway import redis_client
from headway.redis_client import REDIS_FAILURES, RedisEndpoint

SAFE_POLICY = "noeviction"
UNREADABLE = "unreadable"
"""The policy, when neither CONFIG GET nor INFO memory answers it (both denied)."""


class RedisLayoutError(Exception):
    """The quota Redis could lose buckets: it evicts keys, or it is the cache's instance."""


async def eviction_policy(client: aioredis.Redis) -> str:
    """The instance's ``maxmemory-policy``; ``UNREADABLE`` if it will not say."""
    try:
        answer: dict[Any, Any] = dict(await client.config_get("maxmemory-policy"))
        policy = answer.get("maxmemory-policy") or answer.get(b"maxmemory-policy")
        if policy:
            return _text(policy)
    except ResponseError:  # unknown command (renamed) or NOPERM: try INFO
        pass
    try:
        memory = await client.info("memory")
    except ResponseError:
        return UNREADABLE
    policy = memory.get("maxmemory_policy")
    return _text(policy) if policy else UNREADABLE


async def instance_id(client: aioredis.Redis) -> str | None:
    """The server's ``run_id`` (new at each start, unique to the process), if INFO answers."""
    try:
        server = await client.info("server")
    except ResponseError:
        return None
    run_id = server.get("run_id")
    return _text(run_id) if run_id else None


def layout_problem(policy: str, quota_id: str | None, cache_id: str | None) -> str | None:
    """Why this quota instance could lose a bucket; None if it cannot."""
    if quota_id is not None and quota_id == cache_id:
        return (
            "the quota Redis is also the cache's (same run_id): cache traffic would fill or "
            "evict the buckets; give redis.cache_url a server of its own"
        )
    if policy == UNREADABLE:
        return (
            "the quota Redis does not tell its maxmemory-policy (CONFIG GET and INFO denied); "
            "allow one to its user, or set redis.require_noeviction=false if it is noeviction"
        )
    if policy != SAFE_POLICY:
        return (
            f"the quota Redis has maxmemory-policy {policy}, which may evict buckets (a "
            f"forgotten bucket is a full one); run it with --maxmemory-policy {SAFE_POLICY}"
        )
    return None


async def quota_layout_problem(
    quota: aioredis.Redis, cache: RedisEndpoint | None, timeout_s: float = 0.5
) -> str | None:
    """``layout_problem`` of the live quota instance. An unreachable cache instance cannot be
    compared (it is checked at the next call); an unreachable quota instance raises."""
    policy = await eviction_policy(quota)
    quota_id = await instance_id(quota)
    cache_id = None
    if cache is not None:
        client = redis_client.connect(cache, timeout_s)
        try:
            cache_id = await instance_id(client)
        except REDIS_FAILURES:
            cache_id = None
        finally:
            await client.aclose()
    return layout_problem(policy, quota_id, cache_id)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
