"""Three gateways on one pool admit about one pool's worth of work together, not three."""

from __future__ import annotations

import asyncio
import re
import signal
import statistics

import httpx
import pytest

from headway_tools.bench.overload import interactive_only
from headway_tools.bench.spread import run_spread
from headway_tools.loadgen import Step
from tests.e2e.conftest import start_up

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # its figures need the machine alone

GATEWAYS = 3
FLOOR = 2 * 32  # 2 replicas x floor_texts_per_replica: what each gateway took whole before
LOAD_S = 6.0
SAMPLED_FROM_S = 3.0  # the gateways' shares settle within about a second and a half


def admission_state(metrics: str) -> tuple[float, float]:
    """(limit, outstanding texts) of the embed pool, as a gateway's /metrics says."""
    values = []
    for name in ("headway_admission_limit_texts", "headway_outstanding_texts"):
        found = re.search(rf'^{name}{{pool="embed"}} (\S+)$', metrics, re.M)
        assert found, name
        values.append(float(found.group(1)))
    return values[0], values[1]


async def sample(metrics_urls: list[str], until: asyncio.Task) -> list[tuple[float, float, float]]:
    """(seconds into the load, sum of limits, sum of outstanding) every 250 ms, read from
    each gateway's operations listener."""
    samples = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with httpx.AsyncClient(timeout=5) as client:
        while not until.done():
            pages = await asyncio.gather(*(client.get(url + "/metrics") for url in metrics_urls))
            states = [admission_state(page.text) for page in pages]
            samples.append(
                (loop.time() - started, sum(s[0] for s in states), sum(s[1] for s in states))
            )
            await asyncio.wait([until], timeout=0.25)
    return samples


def test_three_gateways_hold_about_one_limit_not_three(tmp_path):
    env = {"HEADWAY_GATEWAY__QUOTA__ENABLED": "false"}  # shedding, not quotas
    up = start_up(
        tmp_path,
        "--backend",
        "synthetic",
        "--embed-replicas",
        "2",
        "--gateways",
        str(GATEWAYS),
        env=env,
    )
    try:
        assert len(up.urls) == GATEWAYS
        # Each gateway its own operations port, none of them a client port.
        assert len(set(up.metrics_urls)) == GATEWAYS
        assert not set(up.metrics_urls) & set(up.urls)

        async def overload() -> list[tuple[float, float, float]]:
            # ~2x the pool's capacity (2 replicas x 32 texts per 210 ms, 2-text requests)
            load = asyncio.ensure_future(
                run_spread(
                    up.urls,
                    interactive_only("synthetic"),
                    [Step(LOAD_S, 300.0)],
                    seed=5,
                    client_timeout_s=3.0,
                )
            )
            samples = await sample(up.metrics_urls, load)
            result = await load
            assert result.report.overall.served > 0
            assert result.report.overall.shed > 0  # overloaded: admission had to refuse
            return samples

        samples = asyncio.run(overload())
    finally:
        assert up.stop(signal.SIGTERM) == 0
    settled = [s for s in samples if SAMPLED_FROM_S <= s[0] <= LOAD_S]
    assert len(settled) >= 4, samples
    limits = statistics.median(s[1] for s in settled)
    outstanding = statistics.median(s[2] for s in settled)
    # each gateway applying the whole floor would hold at least 3 x 64 = 192 together; one
    # gateway's limit on this pool is the floor or Little's law (~90 texts at capacity)
    assert limits < 2.2 * FLOOR, samples
    assert outstanding < 2.2 * FLOOR, samples
