"""ResultsCache: memory first, the shared tier for misses only, promotion, scopes, metrics."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from headway.cache.entry import Entry
from headway.cache.key import namespace, text_key
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.redis_tier import RedisCache
from headway.cache.results import ResultsCache
from headway.gateway.metrics import GatewayMetrics
from headway.settings import CacheSettings, GatewaySettings, Settings

S = "tenant:acme"
NS = namespace(version="v1", processing="p", dimensions=2, kind="embed", scope=S)


class FakeSharedTier:
    """A dict per scope standing in for Redis, recording every call."""

    def __init__(self) -> None:
        self.scopes: dict[str, dict[bytes, Entry]] = {}
        self.asked: list[tuple[str, list[bytes]]] = []
        self.dropped: list[str] = []
        self.closed = False
        self.errors = 0

    async def get_many(self, scope: str, keys: Sequence[bytes]) -> list[Entry | None]:
        self.asked.append((scope, list(keys)))
        held = self.scopes.get(scope, {})
        return [held.get(key) for key in keys]

    async def put_many(self, scope: str, items: Sequence[tuple[bytes, Entry]]) -> None:
        self.scopes.setdefault(scope, {}).update(items)

    async def drop_scope(self, scope: str) -> bool:
        self.dropped.append(scope)
        self.scopes.pop(scope, None)
        return True

    async def close(self) -> None:
        self.closed = True


def key(text: str) -> bytes:
    return text_key(NS, text)


def entry(tokens: int) -> Entry:
    return Entry(values=b"\0" * 8, tokens=tokens)


def lookups(metrics: CacheMetrics, result: str) -> float | None:
    return metrics.registry.get_sample_value("headway_cache_lookups_total", {"result": result})


def make(
    shared: FakeSharedTier | None = None, **settings: object
) -> tuple[ResultsCache, CacheMetrics]:
    metrics = CacheMetrics()
    cache = ResultsCache(
        MemoryCache(1 << 20), shared, metrics, CacheSettings.model_validate(settings)
    )
    return cache, metrics


async def test_only_memory_misses_are_asked_of_the_shared_tier() -> None:
    shared = FakeSharedTier()
    cache, metrics = make(shared)
    cache.memory.put_many(S, [(key("a"), entry(1))])
    shared.scopes[S] = {key("b"): entry(2)}
    found = await cache.get_many(S, [key("a"), key("b"), key("c")])
    assert found == [entry(1), entry(2), None]
    assert shared.asked == [(S, [key("b"), key("c")])]
    assert (lookups(metrics, "memory"), lookups(metrics, "redis"), lookups(metrics, "miss")) == (
        1.0,
        1.0,
        1.0,
    )


async def test_shared_hits_are_promoted_into_memory() -> None:
    shared = FakeSharedTier()
    cache, metrics = make(shared)
    shared.scopes[S] = {key("b"): entry(2)}
    await cache.get_many(S, [key("b")])
    shared.asked.clear()
    assert await cache.get_many(S, [key("b")]) == [entry(2)]
    assert shared.asked == []
    assert (lookups(metrics, "memory"), lookups(metrics, "redis")) == (1.0, 1.0)
    assert cache.memory.get_many("tenant:other", [key("b")]) == [None]  # promoted into S only


async def test_all_memory_hits_ask_nothing_of_the_shared_tier() -> None:
    shared = FakeSharedTier()
    cache, _ = make(shared)
    await cache.put_many(S, [(key("a"), entry(1))])
    assert await cache.get_many(S, [key("a"), key("a")]) == [entry(1), entry(1)]
    assert shared.asked == []


async def test_put_fills_both_tiers_under_the_scope() -> None:
    shared = FakeSharedTier()
    cache, _ = make(shared)
    await cache.put_many(S, [(key("a"), entry(1))])
    assert cache.memory.get_many(S, [key("a")]) == [entry(1)]
    assert shared.scopes == {S: {key("a"): entry(1)}}


async def test_without_a_shared_tier_misses_are_misses() -> None:
    cache, metrics = make(None)
    await cache.put_many(S, [(key("a"), entry(1))])
    assert await cache.get_many(S, [key("a"), key("b")]) == [entry(1), None]
    assert (lookups(metrics, "memory"), lookups(metrics, "miss")) == (1.0, 1.0)
    assert await cache.drop_scope(S) is True
    await cache.close()


async def test_drop_scope_forgets_the_scope_in_both_tiers_and_nothing_else() -> None:
    shared = FakeSharedTier()
    cache, _ = make(shared)
    await cache.put_many(S, [(key("a"), entry(1))])
    await cache.put_many("tenant:other", [(key("b"), entry(2))])
    assert await cache.drop_scope(S) is True
    assert cache.memory.get_many(S, [key("a")]) == [None]
    assert cache.memory.get_many("tenant:other", [key("b")]) == [entry(2)]
    assert shared.dropped == [S]
    assert list(shared.scopes) == ["tenant:other"]


def test_enabled_for_honours_the_switch_and_disabled_tenants() -> None:
    cache, _ = make(disabled_tenants=("secretive",))
    assert cache.enabled_for("acme")
    assert not cache.enabled_for("secretive")
    off, _ = make(enabled=False)
    assert not off.enabled_for("acme")


def test_each_tenant_has_its_own_scope_by_its_id() -> None:
    cache, _ = make()
    assert (cache.scope_of("acme", 1), cache.scope_of("other", 2)) == ("tenant:1", "tenant:2")
    assert cache.scope_of("acme", 3) == "tenant:3"  # acme created again: another scope


def test_only_the_members_of_a_shared_group_share_a_scope() -> None:
    cache, _ = make(shared_groups={"corp": ("search", "support"), "solo": ("lab",)})
    assert cache.scope_of("search", 1) == cache.scope_of("support", 2) == "group:corp"
    assert cache.scope_of("search", 9) == "group:corp"  # a group is joined by name
    assert cache.scope_of("lab", 3) == "group:solo"
    assert cache.scope_of("stranger", 4) == "tenant:4"
    assert cache.scope_of("corp", 5) == "tenant:5"  # a tenant named like a group is apart
    assert cache.scopes_holding("search", 1) == ("tenant:1", "group:corp")
    assert cache.scopes_holding("stranger", 4) == ("tenant:4",)


async def test_the_tiers_state_is_read_when_scraped() -> None:
    shared = FakeSharedTier()
    metrics = CacheMetrics()
    memory = MemoryCache(3 * entry(0).size, 2 * entry(0).size)
    cache = ResultsCache(memory, shared, metrics, CacheSettings())
    await cache.put_many(S, [(key(t), entry(1)) for t in "abc"])
    await cache.put_many("tenant:other", [(key("d"), entry(1))])
    shared.errors = 4
    sample = metrics.registry.get_sample_value
    assert sample("headway_cache_bytes") == memory.bytes == 3 * entry(0).size
    assert sample("headway_cache_entries") == 3
    assert sample("headway_cache_scopes") == 2
    assert sample("headway_cache_evictions_total") == 1
    assert sample("headway_cache_errors_total", {"tier": "redis"}) == 4


def test_cache_metrics_share_the_gateways_registry() -> None:
    registry = CollectorRegistry()
    GatewayMetrics(registry)
    metrics = CacheMetrics(registry)
    ResultsCache(MemoryCache(0), None, metrics, CacheSettings())
    assert registry.get_sample_value("headway_cache_errors_total", {"tier": "redis"}) == 0
    assert registry.get_sample_value("headway_cache_entries") == 0


@pytest.mark.parametrize(
    ("cache_url", "use_redis", "expect_shared"),
    [
        ("redis://127.0.0.1:1/0", True, True),
        ("redis://127.0.0.1:1/0", False, False),
        (None, True, False),  # the quota instance alone: never the cache's (docs/redis.md)
    ],
)
async def test_from_settings_adds_redis_only_with_a_cache_url_and_the_switch(
    cache_url: str | None, use_redis: bool, expect_shared: bool
) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:2/0",
        redis={"cache_url": cache_url},
        gateway=GatewaySettings(
            cache=CacheSettings(redis=use_redis, memory_bytes=1234, memory_scope_bytes=567)
        ),
    )
    cache = ResultsCache.from_settings(settings, CacheMetrics())
    assert (cache.memory.max_bytes, cache.memory.scope_bytes) == (1234, 567)
    assert isinstance(cache.shared, RedisCache) is expect_shared
    await cache.close()
