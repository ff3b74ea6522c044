"""Every worker answer tells the gateway how much that worker completed (admission's share)."""

import asyncio

import httpx

from headway import wire
from tests.service.conftest import auth


async def test_the_gateway_keeps_each_replicas_completed_texts_as_its_answers_say(stack):
    async def embed(n_texts: int) -> int:
        response = await stack.client.post(
            "/v1/embeddings",
            headers=auth(),
            json={"model": "synthetic", "input": [f"text {i}" for i in range(n_texts)]},
        )
        return response.status_code

    assert await asyncio.gather(*(embed(3) for _ in range(6))) == [200] * 6
    pool = stack.gateway.pools["embed"]
    assert sum(worker.completed_texts for worker in stack.workers.values()) == 18
    assert sum(replica.completed_texts or 0 for replica in pool.replicas) == 18


async def test_a_workers_answer_carries_its_counter_and_shadow_work_is_not_counted(stack):
    worker = stack.workers["http://embed-0"]
    app = stack.worker_apps["http://embed-0"]

    async def chunk(priority: wire.Priority) -> str | None:
        body = wire.encode(wire.EmbedChunk("r", ["a", "b"], 5000, priority))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
            response = await client.post(wire.EmbedChunk.path, content=body)
        assert response.status_code == 200
        return response.headers.get(wire.COMPLETED_HEADER)

    assert await chunk(wire.Priority.INTERACTIVE) == "2"
    assert await chunk(wire.Priority.BATCH) == "4"
    assert await chunk(wire.Priority.SHADOW) == "4"
    assert worker.completed_texts == 4
