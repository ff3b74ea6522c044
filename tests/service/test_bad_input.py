import logging

import pytest

from tests.service.conftest import auth

SECRET = "confidential-patient-note-4471"


async def post(stack, path="/v1/embeddings", *, body=None, json=None, headers=None):
    merged = auth() | (headers or {})
    return await stack.client.post(path, content=body, json=json, headers=merged)


def assert_error(response, status, error_type):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == error_type
    assert error["message"]
    assert "Traceback" not in response.text
    return error["message"]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"model": "synthetic", "input": [True]}, "got `bool` - at `$.input[0]`"),
        ({"model": "synthetic", "input": ["a"], "temperature": 1}, "unknown field `temperature`"),
        ({"model": "synthetic", "input": []}, "must not be empty"),
        ({"model": "synthetic", "input": ["ok", ""]}, "`input[1]` is an empty string"),
        ({"model": "synthetic", "input": [[1, 2, 3]]}, "token ids"),
        ({"model": "synthetic", "input": ["x"] * 65}, "the limit is 64"),
        ({"model": "synthetic", "input": ["x" * 201]}, "the limit is 200"),
        ({"model": "synthetic", "input": ["a"], "encoding_format": "hex"}, "encoding_format"),
        ({"model": "synthetic", "input": ["a"], "dimensions": False}, "got `bool`"),
        ({"input": ["a"]}, "missing required field `model`"),
    ],
)
async def test_schema_and_limit_violations_are_422(stack, payload, fragment):
    message = assert_error(await post(stack, json=payload), 422, "validation_error")
    assert fragment in message


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        (b"{not json", 400, "invalid_request"),
        (b"", 400, "invalid_request"),
        (b"[1, 2]", 422, "validation_error"),
        (b"null", 422, "validation_error"),
    ],
)
async def test_malformed_bodies(stack, body, status, error_type):
    response = await post(stack, body=body, headers={"content-type": "application/json"})
    assert_error(response, status, error_type)


@pytest.mark.parametrize("depth", [990, 5_000])
async def test_a_body_nested_too_deeply_for_the_parser_is_400_not_500(stack, depth):
    """A document's extra field (the schema ignores it, so msgspec skips it, recursing)
    holding arrays nested ``depth`` deep: a 400, never the parser's RecursionError as a 500
    (msgspec gives up near the recursion limit less the frames already on the stack)."""
    nested = b"[" * depth + b"]" * depth
    body = b'{"query": "q", "documents": [{"text": "a", "x": %s}]}' % nested
    headers = {"content-type": "application/json"} | auth("demo-key-support-bot")
    response = await post(stack, "/v1/rerank", body=body, headers=headers)
    assert "nested too deeply" in assert_error(response, 400, "invalid_request")


async def test_auth_failures(stack):
    ok = {"model": "synthetic", "input": ["x"]}
    no_key = await stack.client.post("/v1/embeddings", json=ok)
    assert_error(no_key, 401, "unauthorized")
    assert_error(await post(stack, json=ok, headers=auth("wrong")), 401, "unauthorized")
    assert_error(await post(stack, json=ok, headers=auth("demo-admin-key")), 403, "forbidden")


async def test_unknown_model_route_and_method(stack):
    response = await post(stack, json={"model": "gpt-9", "input": ["x"]})
    assert "gpt-9" in assert_error(response, 404, "not_found")
    assert_error(await stack.client.get("/v2/nothing"), 404, "not_found")
    assert_error(await stack.client.get("/v1/embeddings"), 405, "method_not_allowed")


async def test_body_over_the_byte_limit_is_413(stack):
    big = b'{"model": "synthetic", "input": ["' + b"a" * 30_000 + b'"]}'
    response = await post(stack, body=big, headers={"content-type": "application/json"})
    assert_error(response, 413, "payload_too_large")


async def test_non_json_media_type_is_415_but_curl_default_is_accepted(stack):
    body = b'{"model": "synthetic", "input": ["x"]}'
    xml = await post(stack, body=body, headers={"content-type": "text/xml"})
    assert_error(xml, 415, "unsupported_media_type")
    curl = await post(
        stack, body=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert curl.status_code == 200


@pytest.mark.parametrize("value", ["0", "-5", "soon", "1.5"])
async def test_bad_timeout_header_is_422(stack, value):
    response = await post(
        stack, json={"model": "synthetic", "input": ["x"]}, headers={"x-timeout-ms": value}
    )
    assert_error(response, 422, "validation_error")


async def test_input_text_never_reaches_logs_or_error_messages(stack, caplog):
    caplog.set_level(logging.DEBUG)
    cases = [
        {"model": "synthetic", "input": [SECRET, 7]},
        {"model": "synthetic", "input": [SECRET * 10]},
        {"model": "nope", "input": [SECRET]},
        {"model": "synthetic", "input": [SECRET], "extra": SECRET},
    ]
    for payload in cases:
        response = await post(stack, json=payload)
        assert response.status_code >= 400
        assert SECRET not in response.text
    stack.transport.down.update(stack.workers)  # upstream failures get logged
    response = await post(stack, json={"model": "synthetic", "input": [SECRET]})
    assert response.status_code >= 500
    assert caplog.records, "the failure should have been logged"
    assert SECRET not in caplog.text
