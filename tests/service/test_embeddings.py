import base64

import numpy as np
import pytest

from headway.catalog import synthetic_record
from tests.service.conftest import SYNTHETIC, WORKER_URLS, auth, make_stack


async def embed(stack, texts, **extra):
    return await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": texts, **extra}
    )


async def test_embeddings_answer_in_openai_shape_with_version_and_request_id(stack):
    response = await embed(stack, ["pump vibration", "bearing wear"])
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and body["model"] == "synthetic"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 8 for d in body["data"])
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == 8
    assert response.headers["x-model-version"] == synthetic_record(SYNTHETIC).version
    assert len(response.headers["x-request-id"]) == 32


async def test_a_single_string_input_gives_one_embedding(stack):
    response = await embed(stack, "just one")
    assert [d["index"] for d in response.json()["data"]] == [0]


async def test_base64_decodes_to_the_float_embedding(stack):
    texts = ["alpha beta", "gamma"]
    floats = (await embed(stack, texts)).json()["data"]
    encoded = (await embed(stack, texts, encoding_format="base64")).json()["data"]
    for f, e in zip(floats, encoded, strict=True):
        decoded = np.frombuffer(base64.b64decode(e["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))


async def test_fan_out_spreads_chunks_over_replicas_and_keeps_order(stack):
    texts = [f"text number {i}" for i in range(40)]
    together = (await embed(stack, texts)).json()["data"]
    alone = [(await embed(stack, [t])).json()["data"][0]["embedding"] for t in texts]
    assert [d["embedding"] for d in together] == alone
    first_call = stack.transport.calls[: len(stack.transport.calls)]
    assert {url for url, path in first_call if path == "/internal/embed"} == set(WORKER_URLS)


async def test_an_unreachable_replica_is_skipped(stack):
    stack.transport.down.add(WORKER_URLS[0])
    for _ in range(4):
        response = await embed(stack, [f"t{i}" for i in range(40)])
        assert response.status_code == 200
    assert not stack.gateway.pools["embed"].replicas[0].ready


async def test_no_ready_replica_is_503(stack):
    stack.transport.down.update(WORKER_URLS)
    await stack.gateway.pools["embed"].poll_once()
    response = await embed(stack, ["x"])
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "no_ready_replicas"
    assert (await stack.client.get("/readyz")).status_code == 503


async def test_requested_dimensions_must_match_the_model(stack):
    assert (await embed(stack, ["x"], dimensions=8)).status_code == 200
    response = await embed(stack, ["x"], dimensions=256)
    assert response.status_code == 422
    assert "8 dimensions" in response.json()["error"]["message"]


@pytest.mark.parametrize("queue", [4])
async def test_a_full_worker_queue_is_503_with_retry_after(tmp_path, queue):
    from headway.worker.batcher import BatchLimits

    stack = await make_stack(tmp_path, limits=BatchLimits(max_queue_texts=queue))
    try:
        response = await embed(stack, [f"t{i}" for i in range(queue + 1)])
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "overloaded"
        assert int(response.headers["retry-after"]) >= 1
    finally:
        await stack.close()


@pytest.mark.parametrize("ids", [[101, 7592, 102], [[101, 7592, 102], [101, 102]]])
async def test_token_ids_are_refused_with_the_cause_and_langchains_fix(stack, ids):
    response = await embed(stack, ids)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "`input` holds token ids" in message
    assert "check_embedding_ctx_length=False" in message
