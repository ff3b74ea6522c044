"""Overload through real processes: fast 503s with Retry-After, admitted work succeeds."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from tests.e2e.conftest import start_up

pytestmark = pytest.mark.e2e


async def burst(url: str, n_requests: int) -> list[tuple[int, float, str | None]]:
    limits = httpx.Limits(max_connections=n_requests)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one(i: int) -> tuple[int, float, str | None]:
            started = time.perf_counter()
            response = await client.post(
                "/v1/embeddings",
                headers={"authorization": "Bearer demo-key-search-app", "x-timeout-ms": "20000"},
                json={"model": "synthetic", "input": [f"request {i} text {j}" for j in range(8)]},
            )
            return (
                response.status_code,
                time.perf_counter() - started,
                response.headers.get("retry-after"),
            )

        return await asyncio.gather(*(one(i) for i in range(n_requests)))


def test_saturation_sheds_with_retry_after_and_serves_the_admitted(tmp_path, monkeypatch):
    # 2 synthetic replicas at 100 ms per call: each holds at most one 32-text batch at a time.
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__CALL_MS", "100")
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__TEXT_MS", "2")
    monkeypatch.setenv("HEADWAY_GATEWAY__ADMISSION__STATIC_LIMIT_TEXTS", "64")
    monkeypatch.setenv("HEADWAY_GATEWAY__QUOTA__ENABLED", "false")  # shedding, not quotas
    up = start_up(tmp_path, "--backend", "synthetic", "--embed-replicas", "2")
    try:
        results = asyncio.run(burst(up.url, 60))  # 480 texts at once against a limit of 64
    finally:
        assert up.stop(signal.SIGTERM) == 0
    statuses = [status for status, _, _ in results]
    assert set(statuses) == {200, 503}, statuses
    assert statuses.count(200) >= 8  # the limit's worth: 64 texts = 8 requests
    assert all(retry is not None and int(retry) >= 1 for s, _, retry in results if s == 503)
