"""The OpenAPI document states what the server enforces (the e2e fuzzer holds it to that)."""

from tests.service.conftest import TEST_LIMITS, auth
from tests.service.fuzzing import full_gateway


async def spec_of(stack) -> dict:
    response = await stack.client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


async def test_every_route_is_described_with_the_errors_it_can_answer(stack):
    spec = await spec_of(stack)
    routes = stack.gateway_app.handler.router.routes()
    served = {(r.path, r.method.lower()) for r in routes if not r.path.startswith("/console")}
    described = {(path, method) for path, ops in spec["paths"].items() for method in ops}
    assert described == served  # every route but the operator console's pages
    embeddings = spec["paths"]["/v1/embeddings"]["post"]["responses"]
    assert set(embeddings) == {
        "200", "400", "401", "403", "404", "413", "415", "422", "429", "500", "502", "503", "504"
    }  # fmt: skip
    assert "quota_exceeded" in embeddings["429"]["description"]
    assert "overloaded" in embeddings["503"]["description"]
    assert "no_ready_replicas" in embeddings["503"]["description"]
    ready = spec["paths"]["/readyz"]["get"]["responses"]
    assert ready["503"]["content"]["application/json"]["schema"]["$ref"].endswith("/Readiness")


async def test_the_limits_the_server_enforces_are_in_the_schemas(stack):
    schemas = (await spec_of(stack))["components"]["schemas"]
    text = {"type": "string", "minLength": 1, "maxLength": TEST_LIMITS.max_chars}
    embeddings = schemas["EmbeddingsRequest"]
    assert embeddings["additionalProperties"] is False
    single, many = embeddings["properties"]["input"]["anyOf"]
    assert single == text
    assert many == {
        "type": "array",
        "items": text,
        "minItems": 1,
        "maxItems": TEST_LIMITS.max_texts,
    }
    width = embeddings["properties"]["dimensions"]["anyOf"][0]
    assert width == {"enum": [8]}  # the synthetic model the stack serves
    rerank = schemas["RerankRequest"]["properties"]
    assert rerank["query"] == text
    assert rerank["documents"]["maxItems"] == TEST_LIMITS.max_texts
    assert rerank["top_n"]["anyOf"][0] == {"type": "integer", "minimum": 1}


async def test_whole_numbers_written_with_a_fraction_are_accepted_as_json_schema_says(stack):
    body = {"model": "synthetic", "input": ["a"], "dimensions": 8.0}
    assert (await stack.client.post("/v1/embeddings", headers=auth(), json=body)).status_code == 200
    body["dimensions"] = 8.5
    refused = await stack.client.post("/v1/embeddings", headers=auth(), json=body)
    assert refused.status_code == 422
    assert "whole number" in refused.json()["error"]["message"]


async def test_the_headers_and_bodies_a_route_reads_are_described_for_a_fuzzer(tmp_path):
    """What a route reads beyond its key is a parameter or a body in the document, so a
    schema fuzzer sends it: the executor's line routes take the public bodies and name the
    tenant, key and request in headers; a weights file takes a Range."""
    gateway = await full_gateway(tmp_path)
    try:
        spec = (await gateway.client.get("/openapi.json")).json()
    finally:
        await gateway.close()
    for endpoint, body in (("embeddings", "EmbeddingsRequest"), ("rerank", "RerankRequest")):
        line = spec["paths"][f"/internal/batches/v1/{endpoint}"]["post"]
        schema = line["requestBody"]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith(f"/{body}")
        headers = {p["name"] for p in line["parameters"] if p["in"] == "header"}
        assert {"x-headway-tenant-id", "x-headway-key-id", "x-headway-request-id"} <= headers
        assert "X-Timeout-Ms" in headers
    weights = spec["paths"]["/v1/weights/{version}/{file}"]["get"]
    assert [p["name"] for p in weights["parameters"] if p["in"] == "header"] == ["Range"]
