"""The Lua scripts against the pure bucket, on a real Redis."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import RedisError

from headway.gateway.quota import bucket
from headway.gateway.quota.bucket import BucketState
from headway.gateway.quota.redis_store import QuotaStoreUnavailable, RedisQuotaStore, idle_ttl_ms
from headway.gateway.quota.store import Quota
from headway_tools.testing.redis_server import RedisServer
from headway_tools.testing.server import free_port

ACME = 1  # the tenant's id: what its bucket is keyed by
KEY = "headway:quota:id:1"
TIMEOUT_S = 10.0  # a loaded machine's replies, not the gateway's 0.25 s: scripts are tested here


async def stored_state(client: aioredis.Redis) -> BucketState:
    tokens, updated = await client.hmget(KEY, ["tokens", "updated"])
    return BucketState(float(tokens), int(updated) / 1e6)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rate=st.floats(1.0, 5000.0),
    burst=st.floats(1.0, 50.0),
    sequence=st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.003]), st.floats(0.0, 60.0)),
        min_size=1,
        max_size=40,
    ),
)
async def test_script_takes_as_the_pure_bucket_does(
    redis_server: RedisServer, rate: float, burst: float, sequence: list[tuple[float, float]]
) -> None:
    """Step by step: from the stored state and the Redis time the script wrote, bucket.take
    must reach the same decision and the same new state."""
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await client.flushdb()
        quota = Quota(ACME, rate, burst)
        state: BucketState | None = None
        start = await client.time()
        granted_total = 0.0
        for pause_s, cost in sequence:
            if pause_s:
                await asyncio.sleep(pause_s)  # lets the bucket refill; not a wait for a condition
            outcome = await store.take(quota, cost)
            after = await stored_state(client)
            expected = bucket.take(state, after.updated_s, rate, burst, cost)
            # Seconds since the epoch as a float resolve ~0.24 µs; the script counts
            # whole microseconds. That is the only noise allowed.
            noise = rate * 1e-6 + 1e-9
            before_tokens = expected.remaining + (cost if expected.granted else 0.0)
            if abs(before_tokens - cost) > noise:
                assert outcome.granted == expected.granted
            assert outcome.remaining == after.tokens
            assert after.tokens == pytest.approx(expected.state.tokens, abs=noise)
            if outcome.granted:
                assert outcome.retry_after_s == 0.0
                granted_total += cost
            elif cost > burst:
                assert outcome.retry_after_s == math.inf
            else:
                assert outcome.retry_after_s == pytest.approx(
                    (cost - outcome.remaining) / rate, rel=1e-9
                )
            state = after
        end = await client.time()
        elapsed = (end[0] - start[0]) + (end[1] - start[1]) / 1e6
        assert granted_total <= burst + rate * elapsed + 1e-6
    finally:
        await store.close()
        await client.aclose()


async def test_refund_gives_tokens_back_never_above_burst(redis_server: RedisServer) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    quota = Quota(ACME, rate=0.001, burst=10)  # refill negligible within the test
    try:
        assert (await store.take(quota, 10)).granted
        assert not (await store.take(quota, 4)).granted
        await store.refund(quota, 4)
        assert (await store.take(quota, 4)).granted
        assert not (await store.take(quota, 1)).granted
        await store.refund(quota, 1000)
        full = await store.take(quota, 0)
        assert full.remaining == pytest.approx(10, abs=1e-3)
        assert (await store.take(quota, 10)).granted
        assert not (await store.take(quota, 1)).granted
    finally:
        await store.close()


async def test_refund_of_an_unknown_bucket_creates_nothing(redis_server: RedisServer) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await store.refund(Quota(ACME, 1, 10), 5)
        assert await client.exists(KEY) == 0
    finally:
        await store.close()
        await client.aclose()


async def test_a_bucket_is_its_tenant_ids_so_a_new_tenant_of_a_name_starts_full(
    redis_server: RedisServer,
) -> None:
    """The first acme spends its burst and is deleted; the acme created next (another id)
    has a full bucket, and a bucket an older gateway kept under the name is never read."""
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    client = aioredis.Redis.from_url(redis_server.url)
    first, second = Quota(ACME, rate=0.001, burst=10), Quota(ACME + 1, rate=0.001, burst=10)
    try:
        await client.hset("headway:quota:acme", mapping={"tokens": "0", "updated": "0"})
        assert (await store.take(first, 10)).granted
        assert not (await store.take(first, 1)).granted
        taken = await store.take(second, 10)
        assert taken.granted and taken.remaining == pytest.approx(0, abs=1e-3)
        assert sorted(await client.keys("headway:quota:*")) == [
            b"headway:quota:acme",
            b"headway:quota:id:1",
            b"headway:quota:id:2",
        ]
    finally:
        await store.close()
        await client.aclose()


async def test_cost_above_burst_is_never_granted(redis_server: RedisServer) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    try:
        outcome = await store.take(Quota(ACME, 100, 10), 11)
        assert not outcome.granted
        assert outcome.retry_after_s == math.inf
        assert outcome.limit == 10
        assert (await store.take(Quota(ACME, 100, 10), 10)).granted
    finally:
        await store.close()


async def test_idle_buckets_expire(redis_server: RedisServer) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    client = aioredis.Redis.from_url(redis_server.url)
    quota = Quota(ACME, rate=10, burst=20)
    try:
        await store.take(quota, 1)
        # Both on Redis's clock (a PTTL alone read later counts this machine's delays too);
        # each side reads Redis's command-start clock a moment apart from its TIME: 1%.
        (seconds, micros), left_ms = await client.pipeline().time().pttl(KEY).execute()
        expires_ms = seconds * 1000 + micros / 1000 + left_ms  # both read in one transaction
        taken_ms = int(await client.hget(KEY, "updated")) / 1000
        assert idle_ttl_ms(quota) == 5000
        assert 0.99 * 5000 < expires_ms - taken_ms < 1.01 * 5000
    finally:
        await store.close()
        await client.aclose()


async def test_heartbeat_counts_live_gateways(redis_server: RedisServer) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        for gateway in ["gw-a", "gw-b", "gw-c"]:
            await store.heartbeat(gateway, ttl_s=10)
        assert await store.heartbeat("gw-a", ttl_s=10) == 3
        seconds, _ = await client.time()
        await client.zadd("headway:gateways", {"gw-gone": seconds - 11})
        assert await client.zcard("headway:gateways") == 4
        assert await store.heartbeat("gw-d", ttl_s=10) == 4
        assert await client.zscore("headway:gateways", "gw-gone") is None
    finally:
        await store.close()
        await client.aclose()


async def test_no_server_raises_unavailable_quickly() -> None:
    store = RedisQuotaStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.25)
    started = time.monotonic()
    try:
        with pytest.raises(QuotaStoreUnavailable) as caught:
            await store.take(Quota(ACME, 1, 1), 1)
        assert isinstance(caught.value.__cause__, RedisError | OSError)
        with pytest.raises(QuotaStoreUnavailable):
            await store.refund(Quota(ACME, 1, 1), 1)
        with pytest.raises(QuotaStoreUnavailable):
            await store.heartbeat("gw-a", 10)
    finally:
        await store.close()
    assert time.monotonic() - started < 2.0


async def test_script_survives_a_restart_that_empties_the_script_cache(
    redis_server: RedisServer,
) -> None:
    store = RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S)
    quota = Quota(ACME, rate=0.001, burst=3)
    try:
        assert (await store.take(quota, 3)).granted
        redis_server.kill()
        with pytest.raises(QuotaStoreUnavailable):
            await store.take(quota, 1)
        redis_server.start()
        fresh = await store.take(quota, 1)  # restarted empty: the bucket is full again
        assert fresh.granted
        assert fresh.remaining == pytest.approx(2)
    finally:
        await store.close()


async def test_a_transport_closed_under_the_call_is_the_store_away_not_a_500() -> None:
    """uvloop raises RuntimeError ("unable to perform operation on <TCPTransport
    closed=True>") when Redis dies while redis-py re-opens a pooled connection; the
    chaos run saw it reach the client as a 500. It is an outage like any other."""
    store = RedisQuotaStore(f"redis://127.0.0.1:{free_port()}")

    async def closed_transport(**_: object) -> object:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    store._take = closed_transport  # type: ignore[assignment]
    store._refund = closed_transport  # type: ignore[assignment]
    try:
        with pytest.raises(QuotaStoreUnavailable):
            await store.take(Quota(ACME, 1, 10), 1)
        with pytest.raises(QuotaStoreUnavailable):
            await store.refund(Quota(ACME, 1, 10), 1)
    finally:
        await store.close()
