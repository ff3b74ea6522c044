"""Failed key checks shared through a real Redis: the Lua scripts against the pure bucket,
two gateway apps on one redis-server, and the gateway limiting alone while Redis is away."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from headway.app.process import failed_auth_store
from headway.gateway.auth.failures import FailureLimit, fail, locked_for
from headway.gateway.auth.fallback import FallbackFailureStore
from headway.gateway.auth.metrics import AuthMetrics
from headway.gateway.auth.redis_store import RedisFailureStore
from headway.gateway.auth.store import FailureStoreUnavailable, LocalFailureStore, Subject
from headway.settings import FailedAuthSettings, GatewaySettings, Settings
from headway_tools.testing.redis_server import RedisServer
from tests.service.conftest import Stack, auth, make_stack

LIMIT = FailureLimit(failures=4, window_s=40.0)
FEW = FailedAuthSettings(address_failures=4, address_window_s=40, key_prefix_failures=50)


async def redis_now_s(client: aioredis.Redis) -> float:
    seconds, micros = await client.time()
    return seconds + micros / 1e6


async def written_at_s(client: aioredis.Redis, store: RedisFailureStore, subject: Subject) -> float:
    """The Redis time of the last script that wrote the subject's bucket, as it wrote it."""
    return float(await client.hget(store.key(subject), "updated"))


async def test_the_scripts_count_and_refuse_as_the_pure_bucket_does(redis_server: RedisServer):
    """The pure bucket fed the times the scripts ran at (Redis TIME, as they stored it), so a
    slow machine moves the times, never the verdicts."""
    store = RedisFailureStore(redis_server.url)
    client = aioredis.Redis.from_url(redis_server.url)
    address = Subject("address", "203.0.113.9", LIMIT)
    prefix = Subject("key_prefix", "0a1b2c3d", FailureLimit(failures=2, window_s=10.0))
    try:
        state = None

        async def fail_and_check() -> None:
            """One failure through the script; the pure bucket at its Redis time must agree."""
            nonlocal state
            outcome = await store.fail([address])
            now = await written_at_s(client, store, address)
            was_free = locked_for(state, now, LIMIT) == 0.0
            state = fail(state, now, LIMIT)
            assert outcome[0].started == (was_free and locked_for(state, now, LIMIT) > 0.0)
            assert outcome[0].locked_s == pytest.approx(locked_for(state, now, LIMIT), abs=1e-6)

        for _ in range(4):
            before = await redis_now_s(client)
            if locked_for(state, before, LIMIT) == 0.0:  # it only refills between the reads
                assert await store.locked_for([address, prefix]) == [0.0, 0.0]
            await fail_and_check()
        before = await redis_now_s(client)
        [wait] = await store.locked_for([address])
        after = await redis_now_s(client)
        # 40 s / 4 = 10 s for one back (on an idle machine), less what refilled by the time
        # the script ran, which was between the two reads.
        assert locked_for(state, after, LIMIT) - 1e-6 <= wait
        assert wait <= locked_for(state, before, LIMIT) + 1e-6
        await fail_and_check()  # a failure while locked is not counted
        both = await store.fail([prefix, prefix])  # one call, two counts, atomically
        assert [f.started for f in both] == [False, True]
    finally:
        await store.close()
        await client.aclose()


async def two_gateways(tmp_path, url: str) -> tuple[Stack, Stack]:
    stores = [FallbackFailureStore(RedisFailureStore(url), LocalFailureStore()) for _ in range(2)]
    return (
        await make_stack(tmp_path / "a", failed_auth=FEW, auth_store=stores[0]),
        await make_stack(tmp_path / "b", failed_auth=FEW, auth_store=stores[1]),
    )


async def models(stack: Stack, key: str) -> int:
    return (await stack.client.get("/v1/models", headers=auth(key))).status_code


async def test_failures_on_one_gateway_lock_the_address_out_on_the_other(
    tmp_path, redis_server: RedisServer
):
    first, second = await two_gateways(tmp_path, redis_server.url)
    try:
        assert [await models(first, f"hw_guess{n}") for n in range(2)] == [401, 401]
        assert [await models(second, f"hw_guess{n}") for n in range(2, 4)] == [401, 401]
        assert await models(first, "hw_guess4") == 429  # the fourth was the other's
        refused = await second.client.get("/v1/models", headers=auth("hw_guess5"))
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) == 10
        assert await models(first, "demo-key-search-app") == 429  # new to the address
    finally:
        await first.close()
        await second.close()


async def test_with_redis_away_a_gateway_limits_alone_and_says_so(
    tmp_path, redis_server: RedisServer, caplog
):
    registry = CollectorRegistry()
    settings = Settings(redis_url=redis_server.url, gateway=GatewaySettings(failed_auth=FEW))
    store = failed_auth_store(settings, AuthMetrics(registry))  # as the gateway is built
    assert registry.get_sample_value("headway_auth_limiter_mode", {"mode": "redis"}) == 1
    stack = await make_stack(tmp_path, failed_auth=FEW, auth_store=store)
    try:
        assert await models(stack, "demo-key-search-app") == 200
        redis_server.stop()
        with caplog.at_level(logging.WARNING, "headway.gateway.auth.fallback"):
            statuses = [await models(stack, f"hw_guess{n}") for n in range(6)]
        assert statuses == [401, 401, 401, 401, 429, 429]  # limited locally, not open
        assert registry.get_sample_value("headway_auth_limiter_mode", {"mode": "local"}) == 1
        warnings = [r.getMessage() for r in caplog.records if r.name.endswith("fallback")]
        assert len(warnings) == 1 and "counting failed key checks on this gateway" in warnings[0]
        assert await models(stack, "demo-key-search-app") == 200  # served before: served now
    finally:
        await stack.close()


async def test_a_redis_store_that_cannot_connect_says_so():
    store = RedisFailureStore("redis://127.0.0.1:1/0", timeout_s=0.2)
    try:
        with pytest.raises(FailureStoreUnavailable):
            await store.locked_for([Subject("address", "203.0.113.9", LIMIT)])
    finally:
        await store.close()
