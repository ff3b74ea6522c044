"""A worker's 200 that is not an answer to the chunk is an upstream failure like any other:
retried on another replica, counted toward ejection, refunded when nothing else answers."""

import pytest

from headway import wire
from headway.http.asgi import Request, Response
from tests.service.conftest import WORKER_URLS, auth, fake_worker, make_stack
from tests.service.test_quota import TINY, embed, tiny_stack


def answering(body_for):
    async def embed_chunk(request: Request) -> Response:
        chunk = wire.embed_decoder.decode(request.body)
        return Response(body_for(chunk), content_type=wire.CONTENT_TYPE)

    return embed_chunk


GARBAGE = {
    "not msgpack": lambda chunk: b"\xc1 certainly not msgpack",
    "wrong shape": lambda chunk: wire.encode({"rows": "three"}),
    "too few rows": lambda chunk: wire.encode(
        wire.ChunkResult(chunk.model_version, b"", len(chunk.texts) - 1, 8, 1)
    ),
    "another version": lambda chunk: wire.encode(
        wire.ChunkResult("f" * 64, b"\0" * 4 * 8 * len(chunk.texts), len(chunk.texts), 8, 1)
    ),
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
async def test_a_malformed_answer_is_retried_on_another_replica(tmp_path, garbage):
    stack = await make_stack(tmp_path)
    try:
        bad = WORKER_URLS[0]
        stack.transport.apps[bad] = fake_worker(
            stack.worker_apps[WORKER_URLS[1]], embed=answering(GARBAGE[garbage])
        )
        pool = stack.gateway.pools["embed"]
        statuses = []
        while pool.state(pool.replicas[0]) != "ejected" and len(statuses) < 200:
            statuses.append((await embed(stack, 1, key="demo-key-search-app")).status_code)
        assert pool.state(pool.replicas[0]) == "ejected"  # five malformed answers in a row
        assert set(statuses) == {200}  # each one retried on the good replica
        assert pool.counts.retries == 5
    finally:
        await stack.close()


async def test_when_every_replica_answers_garbage_the_client_gets_502_and_its_texts_back(
    tmp_path,
):
    stack = await tiny_stack(tmp_path)
    try:
        for url in WORKER_URLS:
            stack.transport.apps[url] = fake_worker(
                stack.worker_apps[url], embed=answering(GARBAGE["not msgpack"])
            )
        failed = await embed(stack, 4, key=TINY)
        assert failed.status_code == 502
        assert failed.json()["error"]["type"] == "upstream_error"
        assert "malformed" in failed.json()["error"]["message"]
        again = await embed(stack, 4, key=TINY)
        assert again.status_code == 502
        # charged 4 and refunded 4 each time: the bucket of 10 is still (nearly) full
        assert int(again.headers["x-ratelimit-remaining"]) >= 6
        admin = await stack.client.get("/admin/replicas", headers=auth("demo-admin-key"))
        failures = [r["consecutive_failures"] for r in admin.json()["pools"]["embed"]]
        assert sum(failures) == 4  # two requests, each tried on both replicas
    finally:
        await stack.close()
