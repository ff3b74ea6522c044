"""Hedging: a chunk stuck on a stalled replica is sent to another one after the pool's
p95; the first answer wins and the stalled call is cancelled. Off by default."""

import asyncio
import copy

from headway.http.asgi import App, Request, Response
from headway.settings import RoutingSettings
from tests.service.conftest import WORKER_URLS, auth, fake_worker, make_stack


class Stalled:
    """A replica that is ready but never answers a chunk; counts the calls abandoned."""

    def __init__(self, ready_from: App) -> None:
        self.cancelled = 0
        self.app = fake_worker(ready_from, embed=self._hang)

    async def _hang(self, request: Request) -> Response:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


async def embed(stack, text: str, timeout_ms: int = 2000) -> int:
    """Two texts in chunks of one: the second chunk goes where the first is not (it is
    the less loaded of the two replicas), so one chunk always lands on each."""
    reply = await stack.client.post(
        "/v1/embeddings",
        headers={**auth(), "x-timeout-ms": str(timeout_ms)},
        json={"model": "synthetic", "input": [text, text + "!"]},
    )
    return reply.status_code


async def test_a_stalled_replica_is_hedged_and_its_call_cancelled(tmp_path):
    stack = await make_stack(
        tmp_path, chunk_texts=1, routing=RoutingSettings(hedge_pools=("embed",))
    )
    try:
        pool = stack.gateway.pools["embed"]
        for i in range(60):  # enough answers to know the pool's p95
            assert await embed(stack, f"warm {i}") == 200
        assert pool.hedge_after_s() is not None
        stalled = Stalled(stack.worker_apps[WORKER_URLS[1]])
        stack.transport.apps[WORKER_URLS[0]] = stalled.app
        before = copy.copy(pool.counts)
        for i in range(5):
            assert await embed(stack, f"text {i}") == 200
        assert pool.counts.hedges_won - before.hedges_won == 5  # each chunk on the stalled one
        assert stalled.cancelled == pool.counts.hedges - before.hedges  # every loser called off
        assert pool.replicas[0].outstanding_texts == 0
        admin = await stack.client.get("/admin/replicas", headers=auth("demo-admin-key"))
        assert admin.json()["routing"]["embed"]["hedges"] == pool.counts.hedges
    finally:
        await stack.close()


async def test_a_chunk_stuck_past_several_quantiles_is_hedged_to_a_replica_above_the_p95(
    tmp_path,
):
    """The healthy replica's recent latency is above the pool's p95 (one slow answer under
    load does that): it is no hedge target at the first threshold, but it is once the stuck
    chunk has waited longer than that replica takes."""
    stack = await make_stack(
        tmp_path, chunk_texts=1, routing=RoutingSettings(hedge_pools=("embed",))
    )
    try:
        pool = stack.gateway.pools["embed"]
        for i in range(60):
            assert await embed(stack, f"warm {i}") == 200
        p95 = pool.hedge_after_s()
        assert p95 is not None
        healthy = pool.replicas[1]
        pool.record(healthy, ok=True, latency_s=healthy.latency_s + 20 * p95 / 0.2)
        assert healthy.latency_s > 3 * p95  # at the first threshold, no hedge target
        stack.transport.apps[WORKER_URLS[0]] = Stalled(stack.worker_apps[WORKER_URLS[1]]).app
        before = copy.copy(pool.counts)
        assert await embed(stack, "text", timeout_ms=10_000) == 200
        assert pool.counts.hedges_won - before.hedges_won == 1
    finally:
        await stack.close()


async def test_without_hedging_a_chunk_on_a_stalled_replica_waits_out_its_deadline(tmp_path):
    stack = await make_stack(tmp_path, chunk_texts=1)
    try:
        pool = stack.gateway.pools["embed"]
        for i in range(60):
            assert await embed(stack, f"warm {i}") == 200
        assert pool.hedge_after_s() is None  # hedging is off unless a pool asks for it
        stack.transport.apps[WORKER_URLS[0]] = Stalled(stack.worker_apps[WORKER_URLS[1]]).app
        assert await embed(stack, "text", timeout_ms=300) == 504
        assert pool.counts.hedges == 0
    finally:
        await stack.close()
