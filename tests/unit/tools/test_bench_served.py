"""What the served benchmarks send, and one measured point, against a loopback server."""

import os
from collections.abc import AsyncIterator

import msgspec
import pytest

from headway import wire
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.served import (
    CLIENT,
    GATEWAY,
    WORKER,
    Processes,
    _check,
    gateway_traffic,
    measure,
    worker_traffic,
)
from tests.loadgen.servers import ScriptedServer, scripted_server

pytestmark = pytest.mark.service  # a loopback server, like tests/loadgen

BATCHES = [["a", "b"], ["c"]]


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    async with scripted_server() as server:
        yield server


def test_worker_traffic_is_the_gateways_chunks():
    traffic = worker_traffic("http://w:1", BATCHES, "v" * 64, timeout_ms=500)
    assert traffic.url == "http://w:1/internal/embed"
    assert traffic.headers == (("Content-Type", wire.CONTENT_TYPE),)
    chunks = [wire.embed_decoder.decode(body.content) for body in traffic.bodies]
    assert chunks == [
        wire.EmbedChunk("bench-0", ["a", "b"], 500, wire.Priority.INTERACTIVE, "v" * 64),
        wire.EmbedChunk("bench-1", ["c"], 500, wire.Priority.INTERACTIVE, "v" * 64),
    ]
    assert [body.texts for body in traffic.bodies] == [2, 1]


def test_gateway_traffic_is_openai_embedding_requests_with_the_key():
    traffic = gateway_traffic("http://g:2", BATCHES, "minilm", "key-1")
    assert traffic.url == "http://g:2/v1/embeddings"
    assert ("Authorization", "Bearer key-1") in traffic.headers
    bodies = [msgspec.json.decode(body.content) for body in traffic.bodies]
    assert bodies == [{"model": "minilm", "input": ["a", "b"]}, {"model": "minilm", "input": ["c"]}]


def this_process(url: str) -> Processes:
    pid = os.getpid()
    return Processes(url, url, {WORKER: pid, GATEWAY: pid, CLIENT: pid})


async def test_a_point_warms_up_then_measures_and_reads_the_cpu_around_it(
    scripted: ScriptedServer,
):
    traffic = gateway_traffic(scripted.url, BATCHES, "m", api_key="ok")
    point = await measure(
        traffic,
        this_process(scripted.url),
        path=GATEWAY,
        texts_per_request=2,
        concurrency=2,
        warmup=4,
        requests=10,
    )
    assert len(scripted.received) == 4 + 10
    assert (point.result.requests, point.result.texts) == (10, 5 * 2 + 5 * 1)
    assert set(point.cpu_s) == {WORKER, GATEWAY, CLIENT}
    assert all(cpu_s >= 0 for cpu_s in point.cpu_s.values())
    assert point.requests_per_s == pytest.approx(10 / point.result.elapsed_s)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("shed", "gateway: first request failed: status 503"),
        ("ok", r"gateway: expected 2x384 values, got \(0, 0\)"),  # its answer holds no rows
        ("teapot", "gateway: first request failed: status 418"),
    ],
)
async def test_a_wrong_first_answer_stops_the_benchmark(scripted: ScriptedServer, key, problem):
    traffic = gateway_traffic(scripted.url, BATCHES, "m", api_key=key)
    with pytest.raises(ServingFailed, match=problem):
        await _check(traffic, GATEWAY, 384)
