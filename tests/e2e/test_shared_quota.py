"""One quota across several gateway processes through a real Redis, and Redis failing."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time

import httpx
import pytest

from headway.registry.sqlite import Registry
from headway_tools.testing.redis_server import RedisServer
from tests.e2e.conftest import start_up, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # its figures need the machine alone

KEY = "shared-quota-key"
RATE, BURST = 40.0, 60.0
TEXTS = 4


def with_tenant(data_dir):
    Registry(data_dir / "registry.sqlite3").add_tenant(
        "metered", "interactive", rate_texts_per_s=RATE, burst_texts=BURST, key=KEY
    )


async def hammer(urls: list[str], seconds: float, concurrency: int = 12) -> dict[int, int]:
    """Requests of TEXTS texts, spread over every gateway, for ``seconds``."""
    statuses: dict[int, int] = {}
    targets = itertools.cycle(urls)
    stop_at = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=10) as client:

        async def loop() -> None:
            while time.monotonic() < stop_at:
                response = await client.post(
                    next(targets) + "/v1/embeddings",
                    headers={"authorization": f"Bearer {KEY}"},
                    json={"model": "synthetic", "input": ["t"] * TEXTS},
                )
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        await asyncio.gather(*(loop() for _ in range(concurrency)))
    return statuses


@pytest.fixture
def zero_cost(monkeypatch):
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__CALL_MS", "0")
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__TEXT_MS", "0")
    monkeypatch.setenv("HEADWAY_GATEWAY__QUOTA__HEARTBEAT_S", "0.2")


def test_three_gateways_enforce_one_quota_together(tmp_path, zero_cost):
    with RedisServer() as redis:
        up = start_up(
            tmp_path, "--backend", "synthetic", "--gateways", "3", "--redis-url", redis.url
        )
        try:
            with_tenant(tmp_path)
            time.sleep(0)
            wait_for(lambda: _authorised(up.urls), timeout_s=10, what="gateways to load the key")
            started = time.monotonic()
            statuses = asyncio.run(hammer(up.urls, seconds=3.0))
            elapsed = time.monotonic() - started
        finally:
            assert up.stop(signal.SIGTERM) == 0
    admitted = statuses.get(200, 0) * TEXTS
    allowance = BURST + RATE * elapsed
    assert set(statuses) <= {200, 429}, statuses
    assert statuses[429] > 0
    assert admitted <= allowance  # over-admission: none
    assert admitted >= 0.85 * (BURST + RATE * 3.0) - 2 * TEXTS


def test_redis_down_falls_back_to_a_local_share_and_comes_back(tmp_path, zero_cost):
    with RedisServer() as redis:
        up = start_up(
            tmp_path, "--backend", "synthetic", "--gateways", "2", "--redis-url", redis.url
        )
        try:
            with_tenant(tmp_path)
            wait_for(lambda: _authorised(up.urls), timeout_s=10, what="gateways to load the key")
            redis.kill()
            during = asyncio.run(hammer(up.urls, seconds=2.0))
            assert set(during) <= {200, 429}, during  # never a 5xx, never unlimited
            assert during.get(429, 0) > 0
            with httpx.Client() as client:
                assert 'headway_quota_mode{mode="local"} 1.0' in up.metrics()
                redis.start()
                wait_for(
                    lambda: (
                        _probe(client, up.url)
                        and 'headway_quota_mode{mode="redis"} 1.0' in up.metrics()
                    ),
                    timeout_s=10,
                    what="the gateway to return to Redis",
                )
        finally:
            assert up.stop(signal.SIGTERM) == 0
    # Each of the 2 gateways falls back to burst/2 refilled at rate/2: together at most
    # one burst plus the rate, never the quota times the number of gateways.
    assert during.get(200, 0) * TEXTS <= BURST + RATE * 2.0 + TEXTS


def _probe(client: httpx.Client, url: str) -> bool:
    """One request, so a gateway in fallback tries Redis again."""
    client.post(
        url + "/v1/embeddings",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "synthetic", "input": ["t"]},
    )
    return True


def _authorised(urls: list[str]) -> bool:
    with httpx.Client() as client:
        return all(
            client.get(url + "/v1/models", headers={"authorization": f"Bearer {KEY}"}).status_code
            == 200
            for url in urls
        )
