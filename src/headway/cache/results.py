"""The two tiers together: this gateway's memory first, then Redis for what it lacks.

``get_many`` answers from the memory tier, asks the shared tier (when there is
one) for the misses only, and promotes what it finds there into memory, so a text
another gateway computed costs one Redis round trip here and none after. It counts
each key once by where it was found (``memory``, ``redis`` or ``miss``).
``put_many`` fills memory first (at once visible to concurrent requests), then the
shared tier. The shared tier fails open (``redis_tier.py``), so neither call raises
for Redis.

Scopes. ``scope_of(name, tenant_id)`` is the tenant's own scope (by id), or its shared
group's (by name, ``scopes.py``); the ``scope`` given to each call must be the one the
keys' namespace was made with. The memory tier keeps one LRU per scope under a per-scope and a total
bound (``memory.py``), so one tenant's puts cannot push another's entries out beyond a
fair share; the shared tier files keys under the scope. ``drop_scope`` forgets one
scope in this gateway's memory and in Redis (other gateways' memory keeps it until
evicted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from headway.cache.entry import Entry
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.redis_tier import RedisCache
from headway.cache.scopes import Scopes
from headway.redis_client import cache_endpoint
from headway.settings import CacheSettings, Settings


class SharedTier(Protocol):
    """A cache tier shared by gateways (``RedisCache``): never raises for its backend."""

    @property
    def errors(self) -> int: ...

    async def get_many(self, scope: str, keys: Sequence[bytes]) -> list[Entry | None]: ...

    async def put_many(self, scope: str, items: Sequence[tuple[bytes, Entry]]) -> None: ...

    async def drop_scope(self, scope: str) -> bool: ...

    async def close(self) -> None: ...


class ResultsCache:
    def __init__(
        self,
        memory: MemoryCache,
        shared: SharedTier | None,
        metrics: CacheMetrics,
        settings: CacheSettings,
    ) -> None:
        self.memory = memory
        self.shared = shared
        self._metrics = metrics
        self._settings = settings
        self._disabled = frozenset(settings.disabled_tenants)
        self._scopes = Scopes(settings.shared_groups)
        metrics.watch(memory, shared)

    def enabled_for(self, name: str) -> bool:
        """Settings name tenants (``disabled_tenants``)."""
        return self._settings.enabled and name not in self._disabled

    def scope_of(self, name: str, tenant_id: int) -> str:
        """The scope whose entries the tenant reads and fills: its own, or its group's."""
        return self._scopes.of(name, tenant_id)

    def scopes_holding(self, name: str, tenant_id: int) -> tuple[str, ...]:
        """The scopes to drop with the tenant (``Scopes.holding``)."""
        return self._scopes.holding(name, tenant_id)

    async def get_many(self, scope: str, keys: Sequence[bytes]) -> list[Entry | None]:
        """Each key's entry or ``None``, in order."""
        found = self.memory.get_many(scope, keys)
        missing = [index for index, entry in enumerate(found) if entry is None]
        from_redis = 0
        if missing and self.shared is not None:
            shared = await self.shared.get_many(scope, [keys[index] for index in missing])
            promoted: list[tuple[bytes, Entry]] = []
            for index, entry in zip(missing, shared, strict=True):
                if entry is not None:
                    found[index] = entry
                    promoted.append((keys[index], entry))
            self.memory.put_many(scope, promoted)
            from_redis = len(promoted)
        self._metrics.looked_up(
            memory=len(keys) - len(missing), redis=from_redis, miss=len(missing) - from_redis
        )
        return found

    async def put_many(self, scope: str, items: Sequence[tuple[bytes, Entry]]) -> None:
        self.memory.put_many(scope, items)
        if self.shared is not None:
            await self.shared.put_many(scope, items)

    async def drop_scope(self, scope: str) -> bool:
        """Forget ``scope``'s entries; False if the shared tier could not be reached."""
        self.memory.drop_scope(scope)
        if self.shared is None:
            return True
        return await self.shared.drop_scope(scope)

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()

    @classmethod
    def from_settings(cls, settings: Settings, metrics: CacheMetrics) -> ResultsCache:
        """Memory always; Redis too when ``redis.cache_url`` is set and ``gateway.cache.redis``
        (never in the quota instance, ``redis_url``: docs/redis.md)."""
        cache = settings.gateway.cache
        shared = None
        endpoint = cache_endpoint(settings)
        if endpoint is not None and cache.redis:
            shared = RedisCache(endpoint, ttl_s=cache.redis_ttl_s)
        memory = MemoryCache(cache.memory_bytes, cache.memory_scope_bytes)
        return cls(memory, shared, metrics, cache)
