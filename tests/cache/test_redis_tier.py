"""RedisCache on a real Redis: round trip, TTL, scopes, and failing open when it goes away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

from headway.cache.entry import Entry
from headway.cache.key import namespace, text_key
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.redis_tier import RedisCache
from headway.cache.results import ResultsCache
from headway.cache.scopes import group_scope, tenant_scope
from headway.settings import CacheSettings
from headway_tools.testing.redis_server import RedisServer
from headway_tools.testing.server import free_port
from tests.fakes import FakeClock

S = "tenant:acme"
NS = namespace(version="v1", processing="p", dimensions=2, kind="embed", scope=S)
T = TypeVar("T")
TIER_LOGGER = "headway.cache.redis_tier"
FAST_S = 0.5
"""Far above what a failed call may take (a refused connect, or the 0.2 s deadline)."""
ROOMY = {"timeout_s": 2.0, "deadline_s": 5.0}
"""Timeouts for the tests of what a working Redis does: the defaults (50 ms a socket call,
200 ms a call) are a gateway's, and a busy test machine (the suite on every core) can take
longer to accept the first connection. The tests of failing fast name the defaults."""


def key(text: str) -> bytes:
    return text_key(NS, text)


def entry(tokens: int) -> Entry:
    return Entry(values=tokens.to_bytes(4, "little") * 2, tokens=tokens)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    raw = aioredis.Redis.from_url(redis_server.url)
    yield raw
    await raw.aclose()


@pytest.fixture
async def make_cache(
    redis_server: RedisServer,
) -> AsyncIterator[Callable[..., RedisCache]]:
    made: list[RedisCache] = []

    def make(url: str | None = None, ttl_s: int = 600, **options: Any) -> RedisCache:
        cache = RedisCache(url or redis_server.url, ttl_s, **(ROOMY | options))
        made.append(cache)
        return cache

    yield make
    for cache in made:
        await cache.close()


async def timed(call: Awaitable[T]) -> tuple[T, float]:
    started = time.monotonic()
    result = await call
    return result, time.monotonic() - started


async def test_round_trip(make_cache: Callable[..., RedisCache]) -> None:
    cache = make_cache()
    await cache.put_many(S, [(key("a"), entry(1)), (key("b"), entry(2))])
    assert await cache.get_many(S, [key("b"), key("x"), key("a")]) == [entry(2), None, entry(1)]
    assert await cache.get_many("other", [key("a")]) == [None]
    assert await cache.get_many(S, []) == []
    await cache.put_many(S, [])
    assert cache.errors == 0


async def test_entries_are_stored_encoded_under_their_scope_with_the_ttl(
    make_cache: Callable[..., RedisCache], client: aioredis.Redis
) -> None:
    cache = make_cache(ttl_s=3600)
    await cache.put_many("acme", [(key("a"), entry(7))])
    name = f"headway:cache:acme:{key('a').hex()}"
    assert await client.get(name) == entry(7).encode()
    assert 3590 <= await client.ttl(name) <= 3600


async def test_a_value_that_does_not_decode_is_a_miss_and_an_error(
    make_cache: Callable[..., RedisCache], client: aioredis.Redis
) -> None:
    cache = make_cache()
    await client.set(cache.redis_key(S, key("a")), b"\x01\x02")
    assert await cache.get_many(S, [key("a")]) == [None]
    assert cache.errors == 1
    assert not cache.failing


async def test_drop_scope_deletes_that_scope_only(
    make_cache: Callable[..., RedisCache], client: aioredis.Redis
) -> None:
    cache = make_cache(deadline_s=10.0)  # 2,500 entries
    many = [(key(str(n)), entry(n)) for n in range(2500)]  # more than one SCAN page
    await cache.put_many("acme", many)
    # Scopes whose names a careless pattern would also match: a prefix, a glob.
    for scope in ("acme:x", "acme2", "acm*", "ac?e"):
        await cache.put_many(scope, [(key("a"), entry(1))])
    await client.set("headway:quota:acme", b"1")
    assert await cache.drop_scope("acm*") is True
    assert await cache.get_many("acme", [key("0"), key("2499")]) == [entry(0), entry(2499)]
    assert await cache.drop_scope("acme") is True
    assert await cache.get_many("acme", [k for k, _ in many]) == [None] * len(many)
    for scope in ("acme:x", "acme2", "ac?e"):
        assert await cache.get_many(scope, [key("a")]) == [entry(1)], scope
    assert await cache.get_many("acm*", [key("a")]) == [None]
    assert await client.get("headway:quota:acme") == b"1"


async def test_fails_open_when_redis_dies_and_comes_back_after_retry_s(
    redis_server: RedisServer,
    make_cache: Callable[..., RedisCache],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=TIER_LOGGER)
    clock = FakeClock()
    cache = make_cache(clock=clock, retry_s=5.0)
    await cache.put_many(S, [(key("a"), entry(1))])
    assert await cache.get_many(S, [key("a")]) == [entry(1)]

    redis_server.kill()
    found, took = await timed(cache.get_many(S, [key("a"), key("b")]))
    assert found == [None, None] and took < FAST_S
    assert cache.errors == 1 and cache.failing
    # Skipped now: no call to Redis, no error counted, nothing raised.
    _, took = await timed(cache.put_many(S, [(key("b"), entry(2))]))
    assert await cache.get_many(S, [key("a")]) == [None]
    assert took < FAST_S and cache.errors == 1
    assert await cache.drop_scope("acme") is False  # tried anyway, and failed
    assert cache.errors == 2

    redis_server.start()  # empty: no persistence
    clock.advance(4.9)
    await cache.put_many(S, [(key("a"), entry(1))])
    assert await cache.get_many(S, [key("a")]) == [None]  # still skipped
    clock.advance(0.2)
    await cache.put_many(S, [(key("a"), entry(1))])  # the probe: answered
    assert not cache.failing
    assert await cache.get_many(S, [key("a")]) == [entry(1)]
    assert cache.errors == 2

    logged = [r for r in caplog.records if r.name == TIER_LOGGER]
    assert [r.levelno for r in logged] == [logging.WARNING, logging.INFO]
    assert "retrying every 5.0 s" in logged[0].getMessage()


async def test_a_server_that_never_answers_costs_one_deadline(
    make_cache: Callable[..., RedisCache],
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    port = free_port()
    server = await asyncio.start_server(silent, "127.0.0.1", port)
    try:
        clock = FakeClock()
        cache = make_cache(
            url=f"redis://127.0.0.1:{port}/0", clock=clock, timeout_s=0.05, deadline_s=0.2
        )
        found, took = await timed(cache.get_many(S, [key("a")]))
        assert found == [None] and took < FAST_S
        connections = len(accepted)
        await cache.put_many(S, [(key("a"), entry(1))])  # skipped, not tried
        assert cache.errors == 1 and len(accepted) == connections
        clock.advance(5.0)
        _, took = await timed(cache.put_many(S, [(key("a"), entry(1))]))
        assert took < FAST_S and cache.errors == 2
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_gateways_share_entries_through_redis(redis_server: RedisServer) -> None:
    def gateway() -> ResultsCache:
        shared = RedisCache(redis_server.url, ttl_s=600, **ROOMY)
        return ResultsCache(MemoryCache(1 << 20), shared, CacheMetrics(), CacheSettings())

    first, second = gateway(), gateway()
    try:
        await first.put_many(S, [(key("a"), entry(1))])
        assert await second.get_many(S, [key("a"), key("b")]) == [entry(1), None]
        assert second.memory.get_many(S, [key("a")]) == [entry(1)]  # promoted
        assert await second.drop_scope(S) is True
        assert await first.get_many(S, [key("a")]) == [entry(1)]  # its memory still has it
        first.memory.clear()
        assert await first.get_many(S, [key("a")]) == [None]
    finally:
        await first.close()
        await second.close()


async def test_tenant_and_group_scopes_never_meet_in_redis(
    make_cache: Callable[..., RedisCache], client: aioredis.Redis
) -> None:
    """A tenant's keys (by its id) are never a group's, whatever the group is named."""
    cache = make_cache()
    scopes = [tenant_scope(7), group_scope("7"), group_scope("corp")]
    for scope in scopes:
        await cache.put_many(scope, [(key("a"), entry(1))])
    assert len(set(await client.keys("headway:cache:*"))) == 3
    assert await cache.drop_scope(tenant_scope(7)) is True
    assert await cache.drop_scope(group_scope("corp")) is True
    assert await cache.get_many(group_scope("7"), [key("a")]) == [entry(1)]
    assert await client.keys("headway:cache:*") == [
        f"headway:cache:group:7:{key('a').hex()}".encode()
    ]


async def test_across_gateways_a_tenant_reads_only_its_own_scope(redis_server: RedisServer) -> None:
    """Tenant A's entry, filled through one gateway, is a miss for tenant B on another,
    and a hit for A there; deleting A in Redis leaves B's entries."""
    settings = CacheSettings()

    def gateway() -> ResultsCache:
        shared = RedisCache(redis_server.url, ttl_s=600, **ROOMY)
        return ResultsCache(MemoryCache(1 << 20), shared, CacheMetrics(), settings)

    first, second = gateway(), gateway()
    a, b = first.scope_of("tenant-a", 1), first.scope_of("tenant-b", 2)
    key_for = {scope: text_key(namespace("v1", "p", 2, "embed", scope), "text") for scope in (a, b)}
    try:
        await first.put_many(a, [(key_for[a], entry(1))])
        assert await second.get_many(b, [key_for[b]]) == [None]
        assert await second.get_many(a, [key_for[a]]) == [entry(1)]
        await second.put_many(b, [(key_for[b], entry(2))])
        assert await first.drop_scope(a) is True
        third = gateway()
        try:
            assert await third.get_many(a, [key_for[a]]) == [None]
            assert await third.get_many(b, [key_for[b]]) == [entry(2)]
        finally:
            await third.close()
    finally:
        await first.close()
        await second.close()
