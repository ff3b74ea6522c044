"""Cohere v2 (``/v2/embed``, ``/v2/rerank``) in process: Cohere's shapes, the native route's
numbers, and the same stages (quota, usage event) as every model route."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import pytest

from headway.catalog import synthetic_record
from headway.gateway.endpoints import cohere_types
from headway.metering.sink import MemorySink
from headway.registry.sqlite import Registry
from tests.service.conftest import SYNTHETIC, auth, make_stack

TEXTS = ["pump vibration", "bearing wear", "invoice 4471 is overdue"]
DOCS = ["Invoice 4471 is overdue", "Pump vibration rises", "The compressor seal leaked"]
MRL_SEED = 5


async def v2_embed(stack, key="demo-key-search-app", **body):
    payload = {"model": "synthetic", "texts": TEXTS, "input_type": "search_document"} | body
    return await stack.client.post("/v2/embed", headers=auth(key), json=payload)


async def native_rows(stack, texts=TEXTS, model="synthetic"):
    response = await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": model, "input": texts}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_float_embeddings_are_the_native_routes_in_cohere_shape(stack):
    response = await v2_embed(stack)
    assert response.status_code == 200, response.text
    body = response.json()
    native = await native_rows(stack)
    assert body["id"] == response.headers["x-request-id"]
    assert body["response_type"] == "embeddings_by_type"
    assert body["texts"] == TEXTS
    assert set(body["embeddings"]) == {"float"}  # float when no type is asked for
    assert body["embeddings"]["float"] == [d["embedding"] for d in native["data"]]
    assert body["meta"] == {
        "api_version": {"version": "2"},
        "billed_units": {"input_tokens": native["usage"]["total_tokens"]},
    }
    assert response.headers["x-model-version"] == synthetic_record(SYNTHETIC).version


async def test_every_embedding_type_is_derived_from_the_same_float_rows(stack):
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    embeddings = (await v2_embed(stack, embedding_types=types)).json()["embeddings"]
    assert set(embeddings) == set(types)
    rows = np.asarray(embeddings["float"], dtype=np.float32)
    for kind in ("int8", "uint8", "binary", "ubinary"):
        expected = getattr(cohere_types, f"{kind}_rows")(rows)
        assert embeddings[kind] == expected
    decoded = [np.frombuffer(base64.b64decode(s), dtype="<f4") for s in embeddings["base64"]]
    np.testing.assert_array_equal(np.stack(decoded), rows)
    assert all(len(row) == 1 for row in embeddings["binary"])  # 8 dimensions: one byte
    only = (await v2_embed(stack, embedding_types=["int8"])).json()["embeddings"]
    assert set(only) == {"int8"} and only["int8"] == embeddings["int8"]


async def test_rerank_is_the_native_ranking_in_cohere_v2_shape(stack):
    key = auth("demo-key-support-bot")
    body = {"model": "synthetic", "query": "pump vibration", "documents": DOCS}
    v1 = (await stack.client.post("/v1/rerank", headers=key, json=body)).json()
    response = await stack.client.post("/v2/rerank", headers=key, json=body | {"top_n": 2})
    assert response.status_code == 200, response.text
    v2 = response.json()
    assert v2["id"] == response.headers["x-request-id"]
    assert v2["results"] == v1["results"][:2]
    assert v2["meta"] == {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}
    nulls = body | {"top_n": None, "max_tokens_per_doc": None, "priority": 0}
    everything = await stack.client.post("/v2/rerank", headers=key, json=nulls)
    assert everything.json()["results"] == v1["results"]  # as LangChain's CohereRerank sends


@pytest.mark.parametrize(
    ("path", "change", "fragment"),
    [
        ("/v2/embed", {"input_type": "image"}, "headway embeds texts"),
        ("/v2/embed", {"images": ["data:image/png;base64,AAAA"]}, "unknown field `images`"),
        ("/v2/embed", {"embedding_types": ["int4"]}, "embedding_types"),
        ("/v2/embed", {"texts": []}, "`texts` must not be empty"),
        ("/v2/embed", {"output_dimension": 4}, "not trained to be truncated"),
        ("/v2/embed", {"model": None}, "model"),
        ("/v2/rerank", {"top_n": 0}, "`top_n` must be at least 1"),
        ("/v2/rerank", {"max_tokens_per_doc": 0}, "at least 1"),
        ("/v2/rerank", {"documents": [{"text": "v1's objects"}]}, "Expected `str`"),
        ("/v2/rerank", {"return_documents": True}, "unknown field `return_documents`"),
    ],
)
async def test_what_cohere_allows_and_headway_cannot_do_is_a_422_that_says_why(
    stack, path, change, fragment
):
    if path == "/v2/embed":
        body = {"model": "synthetic", "texts": TEXTS, "input_type": "search_query"}
    else:
        body = {"model": "synthetic", "query": "q", "documents": DOCS}
    response = await stack.client.post(path, headers=auth(), json=body | change)
    assert response.status_code == 422, response.text
    assert fragment in response.json()["error"]["message"]


async def test_accepted_values_that_change_nothing(stack):
    expected = (await v2_embed(stack)).json()["embeddings"]
    for change in (
        {"truncate": "END"},
        {"input_type": "search_query"},
        {"output_dimension": 8},
        {"priority": 3},
        {"max_tokens": 100_000},  # the synthetic model records no limit
    ):
        response = await v2_embed(stack, **change)
        assert response.status_code == 200, (change, response.text)
        assert response.json()["embeddings"] == expected


async def test_the_same_stages_run_quota_and_a_usage_event_per_request(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        stack.registry.add_tenant(
            "tiny", "interactive", rate_texts_per_s=0.01, burst_texts=4, key="tiny-key"
        )
        await stack.gateway.snapshots.refresh()
        embedded = await v2_embed(stack, key="tiny-key")
        ranked = await stack.client.post(
            "/v2/rerank",
            headers=auth("demo-key-support-bot"),
            json={"model": "synthetic", "query": "q", "documents": DOCS},
        )
        assert embedded.status_code == ranked.status_code == 200
        refused = await v2_embed(stack, key="tiny-key")  # 3 texts more than 1 left
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "quota_exceeded"
        events = {event.request_id: event for event in sink.events}
        assert len(events) == 2
        embed_event = events[embedded.headers["x-request-id"]]
        rank_event = events[ranked.headers["x-request-id"]]
        assert (embed_event.endpoint, embed_event.tenant, embed_event.texts) == (
            "embeddings",
            "tiny",
            3,
        )
        assert embed_event.tokens == embedded.json()["meta"]["billed_units"]["input_tokens"]
        assert (rank_event.endpoint, rank_event.tenant, rank_event.texts) == (
            "rerank",
            "support-bot",
            3,
        )
    finally:
        await stack.close()


async def matryoshka_stack(tmp_path):
    """Worker 1 serves a version registered (before the stack registers it without an
    alias) as ``mrl``: trained for widths 4 and 2, reading at most 16 tokens a text."""
    record = synthetic_record(SYNTHETIC.model_copy(update={"seed": MRL_SEED}))
    declared = replace(record, max_tokens=16, matryoshka_dimensions=(4, 2))
    Registry(tmp_path / "registry.sqlite3").add_model(declared, ("mrl",))
    return await make_stack(tmp_path, seeds=(0, MRL_SEED))


async def test_a_matryoshka_model_is_truncated_and_renormalised_on_every_route(tmp_path):
    stack = await matryoshka_stack(tmp_path)
    try:
        full = np.asarray([d["embedding"] for d in (await native_rows(stack, model="mrl"))["data"]])
        head = full[:, :4] / np.linalg.norm(full[:, :4], axis=1, keepdims=True)
        narrow = await stack.client.post(
            "/v1/embeddings", headers=auth(), json={"model": "mrl", "input": TEXTS, "dimensions": 4}
        )
        v2 = await v2_embed(stack, model="mrl", output_dimension=4)
        rows_v1 = np.asarray([d["embedding"] for d in narrow.json()["data"]])
        rows_v2 = np.asarray(v2.json()["embeddings"]["float"])
        np.testing.assert_allclose(rows_v1, head, atol=1e-6)
        np.testing.assert_array_equal(rows_v1, rows_v2)
        refused = await v2_embed(stack, model="mrl", output_dimension=3)
        assert refused.status_code == 422
        assert "can produce 8, 4, 2 dimensions, not 3" in refused.json()["error"]["message"]
        spec = (await stack.client.get("/openapi.json")).json()
        width = spec["components"]["schemas"]["EmbeddingsRequest"]["properties"]["dimensions"]
        assert width["anyOf"][0] == {"enum": [2, 4, 8]}
    finally:
        await stack.close()


async def test_a_token_limit_below_the_models_is_refused_at_or_above_it_served(tmp_path):
    stack = await matryoshka_stack(tmp_path)
    try:
        assert (await v2_embed(stack, model="mrl", max_tokens=16)).status_code == 200
        short = await v2_embed(stack, model="mrl", max_tokens=8)
        assert short.status_code == 422
        assert "reads up to 16 tokens" in short.json()["error"]["message"]
        body = {"model": "mrl", "query": "q", "documents": DOCS, "max_tokens_per_doc": 4096}
        rank = await stack.client.post("/v2/rerank", headers=auth(), json=body)
        assert rank.status_code == 200, rank.text
        body["max_tokens_per_doc"] = 15
        rank = await stack.client.post("/v2/rerank", headers=auth(), json=body)
        assert rank.status_code == 422
        assert "max_tokens_per_doc" in rank.json()["error"]["message"]
    finally:
        await stack.close()
