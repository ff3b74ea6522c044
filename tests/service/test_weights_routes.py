"""``/v1/weights``: the gateway serving its model store, in-process and over loopback."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from headway.http.asgi import App
from headway.models.errors import ModelIntegrityError, ModelNotFoundError, WeightsUnavailable
from headway.models.store import ModelStore, StoredModel
from headway.models.weights.fetch import fetch_artifact, partial_dir
from headway.models.weights.http import HttpSource
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.serve import listening_socket
from tests.service.conftest import Stack, auth, make_stack
from tests.weights_builders import Recording, stored_artifact, tamper

TOKEN = "worker-credential"
GRAPH_BYTES = 5 << 20  # several of the 1 MiB chunks the file response sends


@dataclass
class Weights:
    app: App
    client: httpx.AsyncClient
    store: ModelStore
    model: StoredModel
    stack: Stack


@pytest.fixture
async def weights(tmp_path: Path) -> Any:
    store = ModelStore(tmp_path / "models")
    model = stored_artifact(store, graph=bytes(range(256)) * (GRAPH_BYTES // 256))
    stack = await make_stack(tmp_path, weights=(store, TOKEN))
    yield Weights(stack.gateway_app, stack.client, store, model, stack)
    await stack.close()


def url(model: StoredModel, name: str = "") -> str:
    return f"/v1/weights/{model.version}" + (f"/{name}" if name else "")


async def test_only_an_admin_key_or_the_worker_credential_reads_the_store(weights) -> None:
    client, model = weights.client, weights.model
    for headers, status in [
        ({}, 401),
        (auth("not-a-key"), 401),
        (auth(TOKEN + "x"), 401),
        (auth(), 403),  # a tenant's key
        (auth(DEMO_ADMIN_KEY), 200),
        (auth(TOKEN), 200),
    ]:
        for path in (url(model), url(model, "tokenizer.json")):
            answer = await client.get(path, headers=headers)
            assert answer.status_code == status, (path, headers)
            if status != 200:
                assert answer.json()["error"]["type"] in ("unauthorized", "forbidden")


async def test_the_listing_names_each_file_its_size_and_sha256(weights) -> None:
    answer = await weights.client.get(url(weights.model), headers=auth(TOKEN))
    listing = answer.json()
    assert listing["version"] == weights.model.version
    assert listing["signature"] is None
    for entry in listing["files"]:
        data = (weights.model.path / entry["name"]).read_bytes()
        assert entry == {
            "name": entry["name"],
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    weights.store.put_signature(weights.model.version, "c2lnbmF0dXJl")  # signed while served
    again = await weights.client.get(url(weights.model), headers=auth(TOKEN))
    assert again.json()["signature"] == "c2lnbmF0dXJl"


async def test_a_file_comes_whole_or_from_a_byte_with_its_sha256_as_etag(weights) -> None:
    client, model = weights.client, weights.model
    whole = model.onnx_path.read_bytes()
    answer = await client.get(url(model, "model.onnx"), headers=auth(TOKEN))
    assert answer.status_code == 200
    assert answer.content == whole
    assert answer.headers["etag"] == f'"{hashlib.sha256(whole).hexdigest()}"'
    assert answer.headers["accept-ranges"] == "bytes"
    assert answer.headers["content-length"] == str(len(whole))

    ranged = auth(TOKEN) | {"range": "bytes=1000000-"}
    tail = await client.get(url(model, "model.onnx"), headers=ranged)
    assert tail.status_code == 206
    assert tail.content == whole[1_000_000:]
    assert tail.headers["content-range"] == f"bytes 1000000-{len(whole) - 1}/{len(whole)}"
    assert tail.headers["etag"] == answer.headers["etag"]

    middle = await client.get(
        url(model, "model.onnx"), headers=auth(TOKEN) | {"range": "bytes=5-9"}
    )
    assert (middle.status_code, middle.content) == (206, whole[5:10])


async def test_a_range_past_the_end_is_416_and_unknown_things_404(weights) -> None:
    client, model = weights.client, weights.model
    size = model.onnx_path.stat().st_size
    past = await client.get(
        url(model, "model.onnx"), headers=auth(TOKEN) | {"range": f"bytes={size}-"}
    )
    assert past.status_code == 416
    assert past.headers["content-range"] == f"bytes */{size}"
    assert past.json()["error"]["type"] == "range_not_satisfiable"
    for path in (f"/v1/weights/{'0' * 64}", f"/v1/weights/{'0' * 64}/model.onnx",
                 "/v1/weights/..", url(model, "registry.sqlite3")):  # fmt: skip
        answer = await client.get(path, headers=auth(TOKEN))
        assert answer.status_code == 404, path
        assert answer.json()["error"]["type"] == "not_found"


async def test_a_file_is_streamed_a_chunk_at_a_time(weights) -> None:
    """At the ASGI level: the body goes out in pieces of at most 1 MiB, not as one."""
    path = url(weights.model, "model.onnx")
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode())],
        "query_string": b"",
    }
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        raise AssertionError("the route waited on the client")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await weights.app(scope, receive, send)
    start, *bodies = sent
    assert start["status"] == 200
    sizes = [len(m["body"]) for m in bodies]
    assert len(sizes) == GRAPH_BYTES >> 20 and max(sizes) == 1 << 20
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert b"".join(m["body"] for m in bodies) == weights.model.onnx_path.read_bytes()


async def test_the_routes_are_in_the_openapi_document(weights) -> None:
    spec = (await weights.client.get("/openapi.json")).json()
    listing = spec["paths"]["/v1/weights/{version}"]["get"]
    assert set(listing["responses"]) == {"200", "401", "403", "404", "429", "500"}
    file = spec["paths"]["/v1/weights/{version}/{file}"]["get"]
    assert set(file["responses"]) == {"200", "206", "401", "403", "404", "416", "429", "500"}
    for status in ("200", "206"):
        assert "application/octet-stream" in file["responses"][status]["content"]
    assert [p["name"] for p in file["parameters"] if p["in"] == "header"] == ["Range"]


@pytest.fixture
def served(weights: Weights) -> Iterator[str]:
    """The same app on a loopback port, served by uvicorn in a thread: its base URL."""
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(weights.app, lifespan="off", log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive()


def test_http_source_fetches_resumes_and_refuses_a_changed_file(
    weights: Weights, served: str, tmp_path: Path
) -> None:
    model = weights.model
    local = ModelStore(tmp_path / "local")
    whole = model.onnx_path.read_bytes()
    partial = partial_dir(local, model.version)
    partial.mkdir(parents=True)
    (partial / "model.onnx").write_bytes(whole[:2_000_000])  # a run cut short left this
    source = HttpSource(served, TOKEN)
    recording = Recording(source)
    fetched = fetch_artifact(recording, local, model.version)
    assert ("model.onnx", 2_000_000) in recording.reads
    assert fetched.onnx_path.read_bytes() == whole
    assert local.verify(model.version) == fetched

    with pytest.raises(ModelNotFoundError, match="has no model"):
        source.listing("0" * 64)
    wrong, nowhere = HttpSource(served, "wrong"), HttpSource("http://127.0.0.1:1", TOKEN)
    with pytest.raises(WeightsUnavailable, match="answered 401"):
        wrong.listing(model.version)
    wrong.close()
    with pytest.raises(WeightsUnavailable, match="cannot reach"):
        nowhere.listing(model.version)

    tamper(model.tokenizer_path)  # behind the serving store's back
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json of model .* has sha256"):
        fetch_artifact(source, ModelStore(tmp_path / "another"), model.version)
    source.close()
