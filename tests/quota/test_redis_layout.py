"""The quota Redis as deployed: signed in (ACL, requirepass, TLS), refused when it could
evict a bucket, limited locally when it is full (OOM under noeviction), and reached by
least-privilege ACL users (docs/redis.md)."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, OutOfMemoryError, RedisError

from headway.app.process import quota_store
from headway.cache.entry import Entry
from headway.cache.redis_tier import RedisCache
from headway.gateway.auth.failures import FailureLimit
from headway.gateway.auth.redis_store import RedisFailureStore
from headway.gateway.auth.store import Subject
from headway.gateway.metrics import GatewayMetrics
from headway.gateway.quota.fallback import FallbackQuotaStore
from headway.gateway.quota.layout import LayoutGuard
from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import LocalQuotaStore, Quota, QuotaStoreUnavailable
from headway.redis_client import RedisEndpoint, connect
from headway.redis_layout import RedisLayoutError, eviction_policy
from headway.settings import Settings
from headway_tools.testing.redis_server import RedisServer

QUOTA = Quota(1, rate=10.0, burst=20.0)


async def test_an_acl_user_signs_in_and_a_wrong_password_is_unavailable() -> None:
    with RedisServer(users={"gateway": "right-horse"}) as server:
        store = RedisQuotaStore(RedisEndpoint(server.url, "gateway", "right-horse"))
        wrong = RedisQuotaStore(RedisEndpoint(server.url, "gateway", "wrong-horse"))
        anonymous = RedisQuotaStore(server.url)
        try:
            assert (await store.take(QUOTA, 5)).remaining == pytest.approx(15, abs=0.1)
            for refused in (wrong, anonymous):
                with pytest.raises(QuotaStoreUnavailable) as caught:
                    await refused.take(QUOTA, 1)
                assert "horse" not in str(caught.value)
        finally:
            for each in (store, wrong, anonymous):
                await each.close()


async def test_requirepass_alone_signs_in_without_a_user() -> None:
    with RedisServer(password="right-horse") as server:
        store = RedisQuotaStore(RedisEndpoint(server.url, password="right-horse"))
        try:
            assert (await store.take(QUOTA, 1)).granted
        finally:
            await store.close()


async def test_tls_with_a_client_certificate_and_without_one() -> None:
    with RedisServer(tls=True, tls_clients=True, password="pw") as server:
        assert server.url.startswith("rediss://")
        signed = RedisEndpoint(
            server.url, None, "pw", server.tls_ca, server.tls_client_cert, server.tls_client_key
        )
        # Handshakes on a loaded machine outlast the gateway's 0.25 s; a refusal is no timeout.
        store = RedisQuotaStore(signed, timeout_s=5.0)
        no_certificate = RedisQuotaStore(
            RedisEndpoint(server.url, None, "pw", server.tls_ca), timeout_s=5.0
        )
        not_trusted = RedisQuotaStore(  # the system's CAs never signed this server
            RedisEndpoint(
                server.url, None, "pw", None, server.tls_client_cert, server.tls_client_key
            ),
            timeout_s=5.0,
        )
        try:
            assert (await store.take(QUOTA, 1)).granted
            # The server's refusal reads as its TLS alert or as a reset, as the race goes.
            with pytest.raises(QuotaStoreUnavailable):
                await no_certificate.take(QUOTA, 1)
            with pytest.raises(QuotaStoreUnavailable, match="certificate verify failed"):
                await not_trusted.take(QUOTA, 1)
        finally:
            for each in (store, no_certificate, not_trusted):
                await each.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
async def test_the_gateway_refuses_to_start_on_an_evicting_instance(policy: str) -> None:
    with RedisServer(maxmemory="64mb", maxmemory_policy=policy) as server:
        store = RedisQuotaStore(server.url)
        try:
            with pytest.raises(RedisLayoutError, match=f"maxmemory-policy {policy}"):
                await LayoutGuard(store, None).check()
        finally:
            await store.close()


async def test_the_gateway_refuses_the_cache_instance_under_another_name() -> None:
    """Settings refuse the same host:port; a second name for the same server is caught by
    its run_id."""
    with RedisServer(maxmemory_policy="noeviction") as server:
        store = RedisQuotaStore(server.url)
        other_name = RedisEndpoint(server.url.replace("127.0.0.1", "localhost"))
        try:
            with pytest.raises(RedisLayoutError, match="also the cache's"):
                await LayoutGuard(store, other_name).check()
        finally:
            await store.close()


async def test_noeviction_on_its_own_instance_starts_and_serves() -> None:
    with RedisServer(maxmemory_policy="noeviction") as quota, RedisServer() as cache:
        store = RedisQuotaStore(quota.url)
        try:
            await LayoutGuard(store, RedisEndpoint(cache.url)).check()
            assert (await store.take(QUOTA, 1)).granted
        finally:
            await store.close()


async def test_the_policy_is_read_from_info_where_config_is_denied() -> None:
    with RedisServer(maxmemory_policy="allkeys-lru") as server:
        admin = aioredis.Redis.from_url(server.url)
        await admin.acl_setuser(
            "limited", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-config"]
        )
        limited = connect(RedisEndpoint(server.url, "limited", "pw"), 1.0)
        try:
            with pytest.raises(RedisError):
                await limited.config_get("maxmemory-policy")
            assert await eviction_policy(limited) == "allkeys-lru"
            await admin.config_set("maxmemory-policy", "noeviction")
            assert await eviction_policy(limited) == "noeviction"
        finally:
            await limited.aclose()
            await admin.aclose()


async def test_an_instance_turned_evicting_after_start_is_used_no_more_until_fixed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with RedisServer(maxmemory_policy="noeviction") as server:
        admin = aioredis.Redis.from_url(server.url)
        shared = RedisQuotaStore(server.url)
        guard = LayoutGuard(shared, None)
        store = FallbackQuotaStore(shared, LocalQuotaStore(), gateways=2, probe_interval_s=0.0)
        try:
            await guard.check()  # start-up: safe
            assert (await store.take(QUOTA, 1)).granted and store.mode == "redis"
            await admin.config_set("maxmemory-policy", "allkeys-lru")
            with caplog.at_level(logging.ERROR, "headway.gateway.quota.layout"):
                await guard.check()  # a heartbeat: logs, and the store refuses itself
            assert "maxmemory-policy allkeys-lru" in caplog.text
            local = await store.take(QUOTA, 1)
            assert store.mode == "local"
            assert local.limit == QUOTA.burst / 2  # the 1/N share, N configured
            await admin.config_set("maxmemory-policy", "noeviction")
            await guard.check()
            await store.take(QUOTA, 1)
            assert store.mode == "redis"
        finally:
            await store.close()
            await admin.aclose()


async def fill_until_out_of_memory(client: aioredis.Redis) -> int:
    """Write junk until a noeviction instance refuses even a small write; how many keys.
    Large values first, then smaller ones: a refused large write leaves room for a bucket."""
    written = 0
    for size in (4096, 256, 16):
        while written < 1_000_000:  # far beyond any maxmemory the tests set
            try:
                await client.set(f"junk:{written}", b"x" * size)
            except OutOfMemoryError:
                break
            written += 1
    return written


async def test_a_full_quota_instance_limits_locally_never_unlimited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OOM under noeviction: the bucket write is refused, so the gateway takes the documented
    fallback (a 1/N local share, logged and in headway_quota_mode), as in an outage."""
    with RedisServer(maxmemory="4mb", maxmemory_policy="noeviction") as server:
        admin = aioredis.Redis.from_url(server.url)
        modes: list[str] = []
        shared = RedisQuotaStore(server.url)
        store = FallbackQuotaStore(
            shared, LocalQuotaStore(), probe_interval_s=60.0, on_mode_change=modes.append
        )
        other = Quota(2, rate=QUOTA.rate, burst=QUOTA.burst)
        try:
            assert await store.heartbeat("gw-a", 30.0) == 1
            assert (await store.take(QUOTA, 1)).granted
            assert await fill_until_out_of_memory(admin) > 0
            with pytest.raises(QuotaStoreUnavailable, match="maxmemory"):
                await shared.take(other, 1)
            with caplog.at_level(logging.WARNING, "headway.gateway.quota.fallback"):
                grants = [(await store.take(other, 1)).granted for _ in range(50)]
            assert modes == ["local"]
            assert "limiting locally at 1/1" in caplog.text
            # The local bucket of the (one) gateway: its burst, then refusals, never all.
            assert 1 <= sum(grants) <= other.burst + 1
            assert not all(grants)
        finally:
            await store.close()
            await admin.aclose()


# docs/redis.md's ACL users: what each instance's clients need, and nothing more.
QUOTA_ACL = (
    "on >quota-pw ~headway:quota:* ~headway:gateways ~headway:auth:* resetchannels -@all "
    "+evalsha +eval +script|load +time +hmget +hset +pexpire +zadd +zremrangebyscore +zcard "
    "+info +config|get +ping"
)
CACHE_ACL = "on >cache-pw ~headway:cache:* resetchannels -@all +mget +set +scan +unlink +info +ping"


async def test_the_documented_least_privilege_acl_users_are_enough() -> None:
    with RedisServer(maxmemory_policy="noeviction") as quota, RedisServer() as cache:
        for server, user, rules in ((quota, "gateway", QUOTA_ACL), (cache, "cache", CACHE_ACL)):
            admin = aioredis.Redis.from_url(server.url)
            await admin.execute_command("ACL", "SETUSER", user, *rules.split())
            await admin.aclose()
        quota_at = RedisEndpoint(quota.url, "gateway", "quota-pw")
        cache_at = RedisEndpoint(cache.url, "cache", "cache-pw")
        store = RedisQuotaStore(quota_at)
        failures = RedisFailureStore(quota_at)
        # A loaded machine outlasts the cache's 50 ms budget; this test is about rights.
        shared_cache = RedisCache(cache_at, ttl_s=60, timeout_s=5.0, deadline_s=10.0)
        subject = Subject("address", "203.0.113.9", FailureLimit(failures=4, window_s=40.0))
        try:
            await LayoutGuard(store, cache_at).check()
            assert (await store.take(QUOTA, 2)).granted
            await store.refund(QUOTA, 1)
            assert await store.heartbeat("gw-a", 5.0) == 1
            assert await failures.locked_for([subject]) == [0.0]
            assert (await failures.fail([subject]))[0].locked_s == 0.0
            entry = Entry(b"\0" * 8, tokens=3)
            await shared_cache.put_many("t:1", [(b"k" * 32, entry)])
            assert await shared_cache.get_many("t:1", [b"k" * 32]) == [entry]
            assert await shared_cache.drop_scope("t:1")
            assert shared_cache.errors == 0
            # And the quota user reaches nothing else: not the cache's keys, not FLUSHALL.
            quota_client = connect(quota_at, 1.0)
            try:
                for command in (("GET", "headway:cache:x"), ("FLUSHALL",)):
                    with pytest.raises(NoPermissionError):
                        await quota_client.execute_command(*command)
            finally:
                await quota_client.aclose()
        finally:
            await store.close()
            await failures.close()
            await shared_cache.close()


async def test_the_gateways_first_heartbeat_refuses_an_evicting_instance_later_ones_limit_locally(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """main.py's wiring: the heartbeat GatewayService.start awaits first raises (the app's
    start-up fails with the reason); on a later beat the gateway serves from a local share."""
    with RedisServer(maxmemory_policy="allkeys-lru") as server:
        settings = Settings(redis_url=server.url, gateway={"quota": {"gateways": 2}})
        store, heartbeat = quota_store(settings, GatewayMetrics())
        assert heartbeat is not None
        try:
            with pytest.raises(RedisLayoutError, match="allkeys-lru"):
                await heartbeat()
            with caplog.at_level(logging.WARNING):
                await heartbeat()
                decision = await store.take(QUOTA, 1)
            assert decision.granted and decision.limit == QUOTA.burst / 2
            assert "allkeys-lru" in caplog.text and "limiting" in caplog.text
        finally:
            await store.close()
