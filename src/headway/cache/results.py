"""The two tiers together: this gateway's memory first, then Redis for what it lacks.

``get_many`` answers from the memory tier, asks the shared tier (when there is
one) for the misses only, and promotes what it finds there into memory, so a text
another gateway computed costs one Redis round trip here and none after. It counts
each key once by where it was found (``memory``, ``redis`` or ``miss``).
``put_many`` fills memory first (at once visible to concurrent requests), then the
shared tier. The shared tier fails open (``redis_tier.py``), so neither call raises
for Redis.

Scopes. Keys already carry their scope inside the namespace (``key.py``), so the
memory tier is one keyspace; the shared tier also files keys under the scope so a
tenant's entries can be deleted with it. The ``scope`` given to each call must be
the one the keys' namespace was made with: ``scope_of(tenant)``, ``"_"`` in global
mode (one entry per text whatever the tenant) or the tenant's name in tenant mode.
``drop_scope`` clears the whole memory tier (tenant deletion is rare and memory
has no index by scope) and the scope's keys in Redis; it is meant for tenant mode,
where a tenant has a scope of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from headway.cache.entry import Entry
from headway.cache.key import GLOBAL_SCOPE
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.redis_tier import RedisCache
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
        metrics.watch(memory, shared)

    def enabled_for(self, tenant: str) -> bool:
        return self._settings.enabled and tenant not in self._disabled

    def scope_of(self, tenant: str) -> str:
        return GLOBAL_SCOPE if self._settings.scope == "global" else tenant

    async def get_many(self, scope: str, keys: Sequence[bytes]) -> list[Entry | None]:
        """Each key's entry or ``None``, in order."""
        found = self.memory.get_many(keys)
        missing = [index for index, entry in enumerate(found) if entry is None]
        from_redis = 0
        if missing and self.shared is not None:
            shared = await self.shared.get_many(scope, [keys[index] for index in missing])
            promoted: list[tuple[bytes, Entry]] = []
            for index, entry in zip(missing, shared, strict=True):
                if entry is not None:
                    found[index] = entry
                    promoted.append((keys[index], entry))
            self.memory.put_many(promoted)
            from_redis = len(promoted)
        self._metrics.looked_up(
            memory=len(keys) - len(missing), redis=from_redis, miss=len(missing) - from_redis
        )
        return found

    async def put_many(self, scope: str, items: Sequence[tuple[bytes, Entry]]) -> None:
        self.memory.put_many(items)
        if self.shared is not None:
            await self.shared.put_many(scope, items)

    async def drop_scope(self, scope: str) -> bool:
        """Forget ``scope``'s entries; False if the shared tier could not be reached."""
        self.memory.clear()
        if self.shared is None:
            return True
        return await self.shared.drop_scope(scope)

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()

    @classmethod
    def from_settings(cls, settings: Settings, metrics: CacheMetrics) -> ResultsCache:
        """Memory always; Redis too when ``redis_url`` is set and ``gateway.cache.redis``."""
        cache = settings.gateway.cache
        shared = None
        if settings.redis_url and cache.redis:
            shared = RedisCache(settings.redis_url, ttl_s=cache.redis_ttl_s)
        return cls(MemoryCache(cache.memory_bytes), shared, metrics, cache)
