import numpy as np

from tests.service.conftest import auth

DOCS = ["Invoice 4471 is overdue", "Pump vibration rises", "The compressor seal leaked"]


async def rerank(stack, **body):
    payload = {"model": "synthetic", "query": "pump vibration", "documents": DOCS} | body
    return await stack.client.post("/v1/rerank", headers=auth("demo-key-support-bot"), json=payload)


async def embedding(stack, text):
    response = await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": [text]}
    )
    return np.asarray(response.json()["data"][0]["embedding"])


async def test_rerank_scores_are_cosine_of_embeddings_ranked_descending(stack):
    response = await rerank(stack)
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == response.headers["x-request-id"]
    assert body["meta"]["billed_units"] == {"search_units": 1}
    query = await embedding(stack, "pump vibration")
    expected = [(float(query @ await embedding(stack, d)) + 1) / 2 for d in DOCS]
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    for result in results:
        assert abs(result["relevance_score"] - expected[result["index"]]) < 1e-5
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert "document" not in results[0]


async def test_top_n_return_documents_and_document_objects(stack):
    objects = [{"text": d, "id": i} for i, d in enumerate(DOCS)]
    full = (await rerank(stack)).json()["results"]
    response = await rerank(stack, documents=objects, top_n=2, return_documents=True)
    results = response.json()["results"]
    assert [r["index"] for r in results] == [r["index"] for r in full[:2]]
    assert [r["document"]["text"] for r in results] == [DOCS[r["index"]] for r in results]


async def test_rerank_fans_out_large_document_lists_in_order(stack):
    documents = [f"document {i}" for i in range(45)]
    results = (await rerank(stack, documents=documents)).json()["results"]
    query = await embedding(stack, "pump vibration")
    expected = [(float(query @ await embedding(stack, d)) + 1) / 2 for d in documents]
    by_index = {r["index"]: r["relevance_score"] for r in results}
    assert np.allclose([by_index[i] for i in range(45)], expected, atol=1e-5)


async def test_rerank_validation(stack):
    for body, fragment in [
        ({"top_n": 0}, "top_n"),
        ({"query": ""}, "query[0]"),
        ({"documents": []}, "documents"),
        ({"documents": [{"title": "no text"}]}, "text"),
        ({"rank_fields": ["x"]}, "rank_fields"),
    ]:
        response = await rerank(stack, **body)
        assert response.status_code == 422, body
        assert fragment in response.json()["error"]["message"]


async def test_models_health_readiness_metrics_openapi(stack):
    models = await stack.client.get("/v1/models", headers=auth())
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"] if m["id"] == "synthetic"] == ["synthetic"]
    assert (await stack.client.get("/v1/models")).status_code == 401
    assert (await stack.client.get("/healthz")).json() == {"status": "ok"}
    ready = await stack.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["pools"]["embed"]["ready"] == 2
    await rerank(stack)
    await stack.client.post("/v1/embeddings", headers=auth(), json={"model": "x", "input": ["a"]})
    metrics = (await stack.ops.get("/metrics")).text
    assert 'headway_requests_total{code="200",route="rerank"} 1.0' in metrics
    assert 'headway_request_failures_total{reason="not_found",route="embeddings"} 1.0' in metrics
    spec = (await stack.client.get("/openapi.json")).json()
    served = {route.path for route in stack.gateway_app.handler.router.routes()}
    console = {path for path in served if path.startswith("/console")}
    assert console and set(spec["paths"]) == served - console  # the console is no API
    assert "EmbeddingsRequest" in spec["components"]["schemas"]


async def test_a_draining_gateway_is_unready_but_still_serves(stack):
    stack.gateway.drain()
    ready = await stack.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["ready"] is False
    response = await stack.client.post(
        "/v1/embeddings", headers=auth(), json={"model": "synthetic", "input": ["a"]}
    )
    assert response.status_code == 200
    metrics = (await stack.ops.get("/metrics")).text
    assert 'headway_chunk_attempts_total{kind="first",pool="embed"} 1.0' in metrics
