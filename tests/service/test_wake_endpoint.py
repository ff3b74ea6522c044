"""`headway up`'s control endpoint on a loopback socket: wakes are queued, the rest refused."""

import httpx
import pytest

from headway.up.wake_endpoint import WakeEndpoint


@pytest.fixture
def endpoint():
    served = WakeEndpoint(["embed", "rerank"])
    served.start()
    yield served
    served.close()


def test_a_wake_is_accepted_and_queued_for_the_supervisor(endpoint):
    assert endpoint.url.startswith("http://127.0.0.1:") and endpoint.url.endswith("/wake")
    assert endpoint.next_wake(0) is None
    answer = httpx.post(endpoint.url, json={"pool": "rerank"})
    assert (answer.status_code, answer.json()) == (202, {"pool": "rerank"})
    assert endpoint.next_wake(5) == "rerank"
    assert endpoint.next_wake(0) is None


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "kind"),
    [
        ("POST", "/other", b'{"pool": "embed"}', {}, 404, "not_found"),
        ("GET", "/wake", b"", {}, 405, "method_not_allowed"),
        ("POST", "/wake", b'{"pool": "embed"}', {"content-type": "text/plain"}, 415, None),
        ("POST", "/wake", b"not json", {}, 400, "invalid_request"),
        ("POST", "/wake", b'["embed"]', {}, 400, "invalid_request"),
        ("POST", "/wake", b'{"pool": 3}', {}, 422, "validation_error"),
        ("POST", "/wake", b'{"pool": "embed", "x": 1}', {}, 422, "validation_error"),
        ("POST", "/wake", b'{"pool": "batch"}', {}, 404, "not_found"),
        ("POST", "/wake", b'{"pool": "' + b"e" * 2000 + b'"}', {}, 413, "payload_too_large"),
    ],
)
def test_anything_else_is_refused_with_a_json_error(
    endpoint, method, path, body, headers, status, kind
):
    url = endpoint.url.removesuffix("/wake") + path
    answer = httpx.request(
        method, url, content=body, headers={"content-type": "application/json"} | headers
    )
    assert answer.status_code == status
    assert answer.json()["error"]["type"] == (kind or "unsupported_media_type")
    assert endpoint.next_wake(0) is None
