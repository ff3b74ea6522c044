"""TEI's protocol (``/embed``, ``/``, ``/rerank``, ``/info``) in process: TEI's shapes and
error format, the native route's numbers, the same stages as every model route."""

from __future__ import annotations

import numpy as np
import pytest

from headway.catalog import synthetic_record
from headway.metering.sink import MemorySink
from tests.service.conftest import SYNTHETIC, TEST_LIMITS, auth, make_stack

TEXTS = ["pump vibration", "bearing wear", "invoice 4471 is overdue"]
DOCS = ["Invoice 4471 is overdue", "Pump vibration rises", "The compressor seal leaked"]


async def native(stack, texts):
    response = await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": texts}
    )
    return [d["embedding"] for d in response.json()["data"]]


@pytest.mark.parametrize("path", ["/embed", "/"])
async def test_embed_answers_one_row_per_text_equal_to_the_native_route(stack, path):
    many = await stack.client.post(path, headers=auth(), json={"inputs": TEXTS})
    assert many.status_code == 200, many.text
    assert many.json() == await native(stack, TEXTS)
    assert many.headers["x-model-version"] == synthetic_record(SYNTHETIC).version
    one = await stack.client.post(path, headers=auth(), json={"inputs": TEXTS[0]})
    assert one.json() == await native(stack, TEXTS[:1])  # a single text: a batch of one
    defaults = {"inputs": TEXTS, "normalize": True, "truncate": True, "dimensions": 8}
    explicit = await stack.client.post(path, headers=auth(), json=defaults)
    assert explicit.json() == many.json()
    assert np.allclose(np.linalg.norm(np.asarray(many.json()), axis=1), 1, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"inputs": [101, 2023, 102]}, "token ids"),
        ({"inputs": [[101, 2023], [101]]}, "token ids"),
        ({"normalize": False}, "`normalize: false` is not served"),
        ({"prompt_name": "query"}, "has no such prompt (it has none)"),
        ({"dimensions": 4}, "not trained to be truncated"),
        ({"inputs": []}, "`inputs` must not be empty"),
        ({"encoding_format": "float"}, "unknown field `encoding_format`"),
    ],
)
async def test_refusals_are_tei_errors_that_say_what_to_change(stack, change, fragment):
    response = await stack.client.post("/embed", headers=auth(), json={"inputs": TEXTS} | change)
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}
    assert body["error_type"] == "Validation"
    assert fragment in body["error"]


async def test_every_error_of_a_tei_route_is_in_tei_format_with_headway_status(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        no_key = await stack.client.post("/embed", json={"inputs": "x"})
        assert no_key.status_code == 401
        assert no_key.json() == {
            "error": "missing API key: send `Authorization: Bearer <key>`",
            "error_type": "Validation",
        }
        not_json = await stack.client.post(
            "/", headers=auth() | {"content-type": "application/json"}, content=b"{nope"
        )
        assert not_json.status_code == 400 and not_json.json()["error_type"] == "Validation"
        stack.registry.add_tenant(
            "tiny", "interactive", rate_texts_per_s=0.01, burst_texts=2, key="tiny-key"
        )
        await stack.gateway.snapshots.refresh()
        over = await stack.client.post("/embed", headers=auth("tiny-key"), json={"inputs": TEXTS})
        assert over.status_code == 429
        assert over.json()["error_type"] == "Overloaded" and "retry-after" not in over.headers
        one = await stack.client.post("/embed", headers=auth("tiny-key"), json={"inputs": "a"})
        assert one.status_code == 200
        refused = await stack.client.post(
            "/embed", headers=auth("tiny-key"), json={"inputs": ["a", "b"]}
        )
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        # Routes that are not TEI's keep headway's format, an unknown path included.
        assert (await stack.client.get("/embed_all")).json()["error"]["type"] == "not_found"
    finally:
        await stack.close()


async def test_rerank_ranks_every_text_in_tei_shape_with_the_native_scores(stack):
    key = auth("demo-key-support-bot")
    v1 = await stack.client.post(
        "/v1/rerank", headers=key, json={"model": "synthetic", "query": "pump", "documents": DOCS}
    )
    response = await stack.client.post(
        "/rerank", headers=key, json={"query": "pump", "texts": DOCS, "return_text": True}
    )
    assert response.status_code == 200, response.text
    ranks = response.json()
    assert [r["index"] for r in ranks] == [r["index"] for r in v1.json()["results"]]
    assert [r["score"] for r in ranks] == [r["relevance_score"] for r in v1.json()["results"]]
    assert [r["text"] for r in ranks] == [DOCS[r["index"]] for r in ranks]
    raw = await stack.client.post(
        "/rerank", headers=key, json={"query": "pump", "texts": DOCS, "raw_scores": True}
    )
    for plain, cosine in zip(ranks, raw.json(), strict=True):
        assert "text" not in cosine
        assert cosine["index"] == plain["index"]
        assert cosine["score"] == pytest.approx(2 * plain["score"] - 1, abs=1e-6)
    whole = await stack.client.post(  # nothing over the limit: nothing to refuse
        "/rerank", headers=key, json={"query": "pump", "texts": DOCS, "truncate": False}
    )
    assert whole.status_code == 200
    assert [r["score"] for r in whole.json()] == [r["score"] for r in ranks]


async def test_info_describes_the_model_embed_serves(stack):
    assert (await stack.client.get("/info")).json()["error_type"] == "Validation"  # no key
    response = await stack.client.get("/info", headers=auth())
    assert response.status_code == 200, response.text
    info = response.json()
    assert info["model_id"] == info["served_model_name"] == "synthetic"
    assert info["model_sha"] == synthetic_record(SYNTHETIC).version
    assert info["model_dtype"] == "float32"
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["max_client_batch_size"] == TEST_LIMITS.max_texts
    assert info["auto_truncate"] is True
    assert info["max_concurrent_requests"] > 0


async def test_tei_requests_go_through_the_same_stages_and_are_billed_as_embeddings(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, metering=sink)
    try:
        embedded = await stack.client.post("/", headers=auth(), json={"inputs": TEXTS})
        ranked = await stack.client.post(
            "/rerank", headers=auth(), json={"query": "q", "texts": DOCS}
        )
        assert embedded.status_code == ranked.status_code == 200
        by_id = {event.request_id: event for event in sink.events}
        assert by_id[embedded.headers["x-request-id"]].endpoint == "embeddings"
        assert by_id[ranked.headers["x-request-id"]].endpoint == "rerank"
        assert by_id[embedded.headers["x-request-id"]].alias == "synthetic"
        counted = stack.metrics()
        assert 'headway_requests_total{code="200",route="tei_root"} 1.0' in counted
        assert 'headway_requests_total{code="200",route="tei_rerank"} 1.0' in counted
    finally:
        await stack.close()
