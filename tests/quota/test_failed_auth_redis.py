"""Failed key checks shared through a real Redis: the Lua scripts against the pure bucket,
two gateway apps on one redis-server, and the gateway limiting alone while Redis is away."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from headway.gateway.auth.failures import FailureLimit, fail, locked_for
from headway.gateway.auth.fallback import FallbackFailureStore
from headway.gateway.auth.metrics import AuthMetrics
from headway.gateway.auth.redis_store import RedisFailureStore
from headway.gateway.auth.store import FailureStoreUnavailable, LocalFailureStore, Subject
from headway.gateway.main import failed_auth_store
from headway.settings import FailedAuthSettings, GatewaySettings, Settings
from headway.testing.redis_server import RedisServer
from tests.service.conftest import Stack, auth, make_stack

LIMIT = FailureLimit(failures=4, window_s=40.0)
FEW = FailedAuthSettings(address_failures=4, address_window_s=40, key_prefix_failures=50)


async def test_the_scripts_count_and_refuse_as_the_pure_bucket_does(redis_server: RedisServer):
    store = RedisFailureStore(redis_server.url)
    address = Subject("address", "203.0.113.9", LIMIT)
    prefix = Subject("key_prefix", "0a1b2c3d", FailureLimit(failures=2, window_s=10.0))
    try:
        state = None
        for number in range(4):
            assert await store.locked_for([address, prefix]) == [0.0, 0.0]
            outcome = await store.fail([address])
            state = fail(state, 0.0, LIMIT)
            assert outcome[0].started == (number == 3)
            assert outcome[0].locked_s == pytest.approx(locked_for(state, 0.0, LIMIT), abs=0.05)
        [wait] = await store.locked_for([address])
        assert wait == pytest.approx(10.0, abs=0.05)  # 40 s / 4: one back
        again = await store.fail([address])  # a failure while locked is not counted
        assert not again[0].started and again[0].locked_s == pytest.approx(10.0, abs=0.05)
        both = await store.fail([prefix, prefix])  # one call, two counts, atomically
        assert [f.started for f in both] == [False, True]
    finally:
        await store.close()


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
