"""The gateway's background loops survive an unexpected exception, and say so.

Each of them used to die silently on one: a pool's readiness, its replica list or
the gateway count of a shared quota then froze for the rest of the process's life.
"""

import asyncio

from headway.transport.base import Reply, UpstreamRequest
from tests.fakes import until
from tests.service.conftest import WORKER_URLS, make_stack


def failures(metrics: str, loop: str) -> float:
    prefix = f'headway_background_failures_total{{loop="{loop}"}} '
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


async def test_the_poll_loop_outlives_a_failing_poll_and_readiness_follows(tmp_path):
    stack = await make_stack(tmp_path, health_interval_s=0.01)
    try:
        pool = stack.gateway.pools["embed"]
        worker = stack.workers[WORKER_URLS[0]]
        real_send = stack.transport.send
        broken = True

        async def send(request: UpstreamRequest) -> Reply:
            if broken and request.path == "/readyz":
                raise RuntimeError("a bug in readiness polling")
            return await real_send(request)

        stack.transport.send = send  # type: ignore[method-assign]
        worker.drain()  # unready: the next good poll must notice
        await until(lambda: failures(stack.metrics(), "embed_poll") >= 3)
        broken = False
        await until(lambda: pool.ready_count == 1)
        worker.ready, worker.draining = True, False
        await until(lambda: pool.ready_count == 2)
    finally:
        await stack.close()


class FlakyDiscovery:
    """Raises something unexpected once, then answers ``urls``."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.calls = 0

    async def addresses(self) -> list[str]:
        self.calls += 1
        if self.calls == 2:  # the first call is at start-up; the loop makes the rest
            raise ValueError("a malformed answer")
        return list(self.urls)


async def test_the_discovery_loop_outlives_an_unexpected_error_and_follows_changes(tmp_path):
    discovery = FlakyDiscovery([WORKER_URLS[0]])
    stack = await make_stack(tmp_path, dns_interval_s=0.01, discovery=discovery)
    try:
        pool = stack.gateway.pools["embed"]
        assert [r.url for r in pool.replicas] == [WORKER_URLS[0]]
        await until(lambda: failures(stack.metrics(), "embed_discover") == 1)
        discovery.urls = list(WORKER_URLS)
        await until(lambda: pool.ready_count == 2)
    finally:
        await stack.close()


async def test_the_quota_heartbeat_outlives_a_failing_beat(tmp_path):
    beats = 0

    async def heartbeat() -> int:
        nonlocal beats
        beats += 1
        if beats == 2:
            raise ConnectionResetError("redis went away mid-reply")
        return 1

    stack = await make_stack(tmp_path, quota_heartbeat=heartbeat, quota={"heartbeat_s": 0.01})
    try:
        await until(lambda: beats >= 5)
        assert failures(stack.metrics(), "quota_heartbeat") == 1
    finally:
        await stack.close()
    stopped_at = beats
    await asyncio.sleep(0.05)
    assert beats == stopped_at  # the loop ended with the gateway
