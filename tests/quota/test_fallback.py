"""FallbackQuotaStore: Redis while it answers, a 1/N local share while it does not."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis

from headway.gateway.quota.fallback import FallbackQuotaStore
from headway.gateway.quota.redis_store import QuotaStoreUnavailable, RedisQuotaStore
from headway.gateway.quota.store import LocalQuotaStore, Quota, QuotaDecision
from headway_tools.testing.redis_server import RedisServer
from tests.fakes import FakeClock

QUOTA = Quota(1, rate=40.0, burst=20.0)
FALLBACK_LOGGER = "headway.gateway.quota.fallback"


class FakeSharedStore:
    """A LocalQuotaStore that can be switched off, standing in for Redis."""

    def __init__(self, clock: FakeClock, live_gateways: int = 4) -> None:
        self.buckets = LocalQuotaStore(clock)
        self.available = True
        self.live_gateways = live_gateways
        self.takes = 0
        self.refunded: list[float] = []

    def _check(self) -> None:
        if not self.available:
            raise QuotaStoreUnavailable("switched off")

    async def take(self, quota: Quota, cost: float) -> QuotaDecision:
        self.takes += 1
        self._check()
        return await self.buckets.take(quota, cost)

    async def refund(self, quota: Quota, cost: float) -> None:
        self._check()
        self.refunded.append(cost)
        await self.buckets.refund(quota, cost)

    async def heartbeat(self, gateway_id: str, ttl_s: float) -> int:
        self._check()
        return self.live_gateways

    async def close(self) -> None:
        pass


class CountingRedisStore(RedisQuotaStore):
    """The real store, counting how often it is asked to take."""

    takes = 0

    async def take(self, quota: Quota, cost: float) -> QuotaDecision:
        self.takes += 1
        return await super().take(quota, cost)


async def bucket_written_at_s(server: RedisServer, store: RedisQuotaStore) -> float:
    """The Redis time the script last wrote QUOTA's bucket at."""
    client = aioredis.Redis.from_url(server.url)
    try:
        return int(await client.hget(store.key(QUOTA.tenant_id), "updated")) / 1e6
    finally:
        await client.aclose()


async def granted_of(store: FallbackQuotaStore, takes: int) -> int:
    return sum([(await store.take(QUOTA, 1)).granted for _ in range(takes)])


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == FALLBACK_LOGGER and r.levelno == level]


async def test_redis_killed_and_restarted_mid_run(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=FALLBACK_LOGGER)
    clock = FakeClock()
    modes: list[str] = []
    shared = CountingRedisStore(redis_server.url, timeout_s=10.0)  # load, not timeouts, here
    store = FallbackQuotaStore(
        shared,
        LocalQuotaStore(clock),
        probe_interval_s=1.0,
        clock=clock,
        on_mode_change=modes.append,
    )
    try:
        for gateway in ["gw-a", "gw-b", "gw-c", "gw-d"]:
            await store.heartbeat(gateway, ttl_s=30)
        assert store.gateways == 4
        # Redis refills at 40/s on its own clock: take more than the burst, in a burst; it
        # grants the burst, and beyond it only what its clock refilled from the first take
        # to the last (both as the script wrote them), however slow this machine is.
        assert (await store.take(QUOTA, 1)).granted
        first_s = await bucket_written_at_s(redis_server, shared)
        granted = 1 + await granted_of(store, 24)
        elapsed_s = await bucket_written_at_s(redis_server, shared) - first_s
        assert QUOTA.burst <= granted <= QUOTA.burst + QUOTA.rate * elapsed_s
        assert store.mode == "redis"

        redis_server.kill()
        # Concurrent requests all find Redis gone; the local bucket starts full at 20/4.
        outcomes = await asyncio.gather(*(store.take(QUOTA, 1) for _ in range(12)))
        assert sum(o.granted for o in outcomes) == 5
        assert store.mode == "local"
        assert modes == ["local"]
        assert len(records(caplog, logging.WARNING)) == 1
        assert "1/4" in records(caplog, logging.WARNING)[0].getMessage()
        refused = outcomes[-1]
        assert (refused.limit, refused.retry_after_s) == (5.0, pytest.approx(1 / 10))

        # Half a second of outage refills 40/4 x 0.5 = 5; no probe is due yet.
        clock.advance(0.5)
        probes = shared.takes
        assert await granted_of(store, 15) == 5
        assert shared.takes == probes
        # A second later the refill is capped at the local burst (5), and the due
        # probe fails: exactly one request probes.
        clock.advance(1.0)
        assert await granted_of(store, 15) == 5
        assert shared.takes == probes + 1
        assert store.mode == "local"
        outage_s, outage_granted = 1.5, 5 + 5 + 5
        # The documented bound for one of N gateways: burst/N + rate/N x outage.
        assert outage_granted <= QUOTA.burst / 4 + QUOTA.rate / 4 * outage_s

        redis_server.start()
        probes = shared.takes
        assert not (await store.take(QUOTA, 1)).granted  # probe not due: still local
        assert shared.takes == probes
        clock.advance(1.0)
        back = await store.take(QUOTA, 1)  # the probe: served by Redis, restarted full
        assert back.granted and back.limit == 20.0 and back.remaining == pytest.approx(19, abs=1)
        assert store.mode == "redis"
        assert modes == ["local", "redis"]
        assert len(records(caplog, logging.WARNING)) == 1
        assert len(records(caplog, logging.INFO)) == 1
    finally:
        await store.close()


async def test_without_heartbeat_or_configuration_n_is_one_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock)
    local = LocalQuotaStore(clock)
    store = FallbackQuotaStore(shared, local, clock=clock)
    shared.available = False
    assert await granted_of(store, 30) == 20
    assert local.share == 1.0
    assert "assuming this gateway is alone" in records(caplog, logging.WARNING)[0].getMessage()


async def test_configured_gateways_win_over_heartbeats() -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock, live_gateways=4)
    local = LocalQuotaStore(clock)
    store = FallbackQuotaStore(shared, local, gateways=2, clock=clock)
    assert await store.heartbeat("gw-a", 10) == 4
    assert store.gateways == 2
    shared.available = False
    assert await granted_of(store, 30) == 10
    assert local.share == 0.5


async def test_heartbeat_swallows_unavailability_and_keeps_the_last_count() -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock, live_gateways=5)
    store = FallbackQuotaStore(shared, LocalQuotaStore(clock), clock=clock)
    assert await store.heartbeat("gw-a", 10) == 5
    shared.available = False
    assert await store.heartbeat("gw-a", 10) is None
    assert store.gateways == 5
    assert store.mode == "redis"  # a missed heartbeat alone does not switch


async def test_probe_at_most_once_per_interval() -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock)
    store = FallbackQuotaStore(shared, LocalQuotaStore(clock), probe_interval_s=0.5, clock=clock)
    shared.available = False
    await granted_of(store, 10)
    assert shared.takes == 1
    clock.advance(0.49)
    await granted_of(store, 10)
    assert shared.takes == 1
    clock.advance(0.01)
    await granted_of(store, 10)
    assert shared.takes == 2
    shared.available = True
    await granted_of(store, 3)
    assert shared.takes == 2
    clock.advance(0.5)
    await granted_of(store, 3)
    assert store.mode == "redis"
    assert shared.takes == 5


async def test_refunds_never_exceed_what_each_store_granted() -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock, live_gateways=4)
    local = LocalQuotaStore(clock)
    store = FallbackQuotaStore(shared, local, clock=clock)
    await store.heartbeat("gw-a", 10)
    assert await granted_of(store, 3) == 3  # from Redis
    shared.available = False
    assert await granted_of(store, 10) == 5  # local bucket: 20/4
    # Refund 8 while local: 5 repay the local bucket, the 3 Redis granted are dropped.
    await store.refund(QUOTA, 8)
    assert (await store.take(QUOTA, 0)).remaining == 5.0
    assert not (await store.take(QUOTA, 5.5)).granted
    # Local grants 2; back on Redis a refund of 4 repays the local ledger (2, dropped)
    # and gives Redis only the other 2.
    assert await granted_of(store, 2) == 2
    shared.available = True
    clock.advance(1.0)
    await store.take(QUOTA, 0)
    assert store.mode == "redis"
    await store.refund(QUOTA, 4)
    assert shared.refunded == [2]


async def test_refund_failure_switches_to_local_and_drops_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    shared = FakeSharedStore(clock)
    local = LocalQuotaStore(clock)
    modes: list[str] = []
    store = FallbackQuotaStore(shared, local, clock=clock, on_mode_change=modes.append)
    await store.take(QUOTA, 1)
    shared.available = False
    await store.refund(QUOTA, 1)
    assert store.mode == "local"
    assert modes == ["local"]
    assert shared.refunded == []


async def test_an_outage_that_flaps_gives_its_local_burst_once() -> None:
    """A Redis restart fails each dead pooled connection in turn, flipping the gateway
    between Redis and local several times in one outage. Time spent on Redis earns the
    local buckets nothing, so the flips do not each grant another burst."""
    clock = FakeClock()
    shared = FakeSharedStore(clock)
    store = FallbackQuotaStore(shared, LocalQuotaStore(clock), gateways=1, probe_interval_s=0.0)
    shared.available = False
    assert await granted_of(store, 30) == 20  # the local burst
    for _ in range(5):
        shared.available = True
        assert (await store.take(QUOTA, 1)).granted  # back on Redis for a while
        clock.advance(10.0)  # long enough to refill any bucket that earned the time
        shared.available = False
        assert await granted_of(store, 30) == 0  # local again: nothing earned meanwhile
    clock.advance(0.5)  # local time refills as before: 40 texts/s
    assert await granted_of(store, 30) == 20
