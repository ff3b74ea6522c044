"""TEI's ``/tokenize`` and ``/decode`` in process: a tenant's key, TEI's shapes, the
worker's tokenizer, the same bounds and quota as ``/embed``."""

from __future__ import annotations

import pytest

from headway.catalog import synthetic_record
from tests.service.conftest import SYNTHETIC, TEST_LIMITS, auth


async def test_tokenize_answers_each_inputs_tokens_with_their_spans(stack):
    response = await stack.client.post(
        "/tokenize", headers=auth(), json={"inputs": ["pump  vibration", "seal"]}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-model-version"] == synthetic_record(SYNTHETIC).version
    first, second = response.json()
    assert [t["text"] for t in first] == ["[CLS]", "pump", "vibration", "[SEP]"]
    assert [(t["start"], t["stop"]) for t in first] == [(None, None), (0, 4), (6, 15), (None, None)]
    assert [t["special"] for t in first] == [True, False, False, True]
    assert len(second) == 3
    bare = await stack.client.post(
        "/tokenize", headers=auth(), json={"inputs": "seal", "add_special_tokens": False}
    )
    assert [t["text"] for t in bare.json()[0]] == ["seal"]


async def test_decode_turns_ids_back_into_text(stack):
    ids = [101, 7, 8, 102]
    one = await stack.client.post("/decode", headers=auth(), json={"ids": ids})
    assert one.status_code == 200, one.text
    assert one.json() == ["7 8"]
    many = await stack.client.post(
        "/decode", headers=auth(), json={"ids": [ids, [9]], "skip_special_tokens": False}
    )
    assert many.json() == ["101 7 8 102", "9"]


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/tokenize", {"inputs": []}, "`inputs` must not be empty"),
        ("/tokenize", {"inputs": ["x" * (TEST_LIMITS.max_chars + 1)]}, "characters"),
        ("/tokenize", {"inputs": ["a"] * (TEST_LIMITS.max_texts + 1)}, "inputs"),
        ("/tokenize", {"inputs": "a", "prompt_name": "query"}, "has no such prompt"),
        ("/tokenize", {"inputs": "a", "truncate": True}, "unknown field `truncate`"),
        ("/decode", {"ids": []}, "1 to"),
        ("/decode", {"ids": [[1] * (TEST_LIMITS.max_chars + 1)]}, "more than"),
        ("/decode", {"ids": ["text"]}, "Expected"),
    ],
)
async def test_what_cannot_be_tokenized_or_decoded_is_a_tei_validation_error(
    stack, path, body, fragment
):
    response = await stack.client.post(path, headers=auth(), json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error_type"] == "Validation"
    assert fragment in response.json()["error"]


@pytest.mark.parametrize("path", ["/tokenize", "/decode"])
async def test_an_anonymous_or_admin_caller_is_refused(stack, path):
    body = {"inputs": "a"} if path == "/tokenize" else {"ids": [1]}
    anonymous = await stack.client.post(path, json=body)
    assert anonymous.status_code == 401
    admin = await stack.client.post(path, headers=auth("demo-admin-key"), json=body)
    assert admin.status_code in (401, 403)


async def test_a_tenant_tokenizing_in_a_loop_meets_its_own_quota_and_no_one_elses(tmp_path):
    from tests.service.conftest import make_stack

    stack = await make_stack(tmp_path)
    try:
        stack.registry.add_tenant(
            "loop", "interactive", rate_texts_per_s=0.5, burst_texts=5, key="k-loop"
        )
        await stack.gateway.snapshots.refresh()
        looping = {"authorization": "Bearer k-loop"}
        body = {"inputs": ["a", "b", "c"]}
        assert (await stack.client.post("/tokenize", headers=looping, json=body)).status_code == 200
        refused = await stack.client.post("/tokenize", headers=looping, json=body)
        assert refused.status_code == 429 and refused.json()["error_type"] == "Overloaded"
        decoded = await stack.client.post("/decode", headers=looping, json={"ids": [[1], [2], [3]]})
        assert decoded.status_code == 429  # the same bucket, by id sequences
        other = await stack.client.post("/tokenize", headers=auth(), json=body)
        assert other.status_code == 200
    finally:
        await stack.close()
