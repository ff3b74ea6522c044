"""One trace per request, across the gateway and its workers, and into the usage event."""

import http.server
import threading
from typing import ClassVar

import msgspec
import pytest

from headway.metering.sink import MemorySink as UsageSink
from headway.otlp.exporter import OtlpExporter
from headway.otlp.setup import ProcessTracing
from headway.tracing.memory import MemorySink
from headway.tracing.spans import Span, SpanKind, Tracer
from headway.tracing.traceparent import parse
from tests.service.conftest import WORKER_URLS, auth, make_stack
from tests.service.test_routing import broken_worker

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CALLER_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
STAGES = {"authenticate", "quota", "admit", "POST /internal/embed", "usage_event"}


async def traced_stack(tmp_path, **extra):
    spans, usage = MemorySink(), UsageSink()
    tracing = ProcessTracing(Tracer(spans, **extra))
    stack = await make_stack(tmp_path, tracing=tracing, metering=usage)
    return stack, spans, usage


async def embed(stack, texts, headers=None):
    return await stack.client.post(
        "/v1/embeddings",
        headers=auth() | (headers or {}),
        json={"model": "synthetic", "input": texts},
    )


def one(spans: list[Span]) -> Span:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


async def test_a_request_is_one_trace_from_the_callers_span_to_the_model_run(tmp_path):
    stack, spans, usage = await traced_stack(tmp_path)
    try:
        answer = await embed(stack, ["pump vibration", "bearing wear"], {"traceparent": CALLER})
    finally:
        await stack.close()
    assert answer.status_code == 200
    assert {s.trace_id for s in spans.spans} == {CALLER_TRACE}

    server = one([s for s in spans.named("POST /v1/embeddings") if s.kind == SpanKind.SERVER])
    assert server.parent_id == 0x00F067AA0BA902B7
    assert server.attributes["http.route"] == "/v1/embeddings"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["headway.tenant"] == "search-app"
    assert server.attributes["headway.request_id"] == answer.headers["x-request-id"]
    assert {s.name for s in spans.children_of(server)} >= STAGES

    attempt = one([s for s in spans.children_of(server) if s.kind == SpanKind.CLIENT])
    assert attempt.name == "POST /internal/embed"
    assert attempt.attributes["headway.attempt"] == "first"
    assert attempt.attributes["url.full"].startswith(tuple(WORKER_URLS))

    worker = one(spans.children_of(attempt))  # the worker continued the attempt's span
    assert worker.kind == SpanKind.SERVER and worker.name == "POST /internal/embed"
    below = {s.name: s for s in spans.children_of(worker)}
    assert set(below) == {"tokenize", "queue", "batch"}
    batch = below["batch"]
    assert batch.attributes["headway.batch.texts"] >= 2
    assert (
        batch.attributes["headway.batch.padded_tokens"] >= batch.attributes["headway.batch.tokens"]
    )
    run = one(spans.children_of(batch))
    assert run.name == "model.run"
    assert batch.start_ns <= run.start_ns <= run.end_ns <= batch.end_ns
    assert below["queue"].end_ns <= batch.start_ns + 1_000_000  # the wait, then the batch

    assert parse(answer.headers["traceresponse"]) == (CALLER_TRACE, server.span_id, True)
    assert [e.trace_id for e in usage.events] == [f"{CALLER_TRACE:032x}"]


async def test_a_retry_is_its_own_attempt_span_and_the_failed_one_says_why(tmp_path):
    stack, spans, _ = await traced_stack(tmp_path)
    bad = WORKER_URLS[0]
    stack.transport.apps[bad] = broken_worker(stack.worker_apps[WORKER_URLS[1]])

    def failed() -> list[Span]:
        return [s for s in spans.named("POST /internal/embed") if s.error]

    try:
        for _ in range(50):  # until a request's first pick is the broken replica
            assert (await embed(stack, ["one text"])).status_code == 200
            if failed():
                break
    finally:
        await stack.close()
    attempts = [s for s in spans.named("POST /internal/embed") if s.kind == SpanKind.CLIENT]
    (first,) = [s for s in attempts if s.error]
    assert first.attributes["url.full"].startswith(bad) and first.error == "upstream_error"
    (retry,) = [s for s in attempts if s.attributes["headway.attempt"] == "retry"]
    assert retry.parent_id == first.parent_id  # both attempts of one request
    assert not retry.error and retry.attributes["http.response.status_code"] == 200


async def test_a_refusal_is_a_server_span_with_its_error(tmp_path):
    stack, spans, _ = await traced_stack(tmp_path)
    stack.transport.down.update(WORKER_URLS)
    try:
        answer = await embed(stack, ["nowhere to go"])
    finally:
        await stack.close()
    assert answer.status_code >= 500
    server = one([s for s in spans.spans if s.kind == SpanKind.SERVER])
    assert server.attributes["error.type"] == str(answer.status_code)
    assert server.error == answer.json()["error"]["type"]


@pytest.mark.parametrize("sampled", ["00", None])
async def test_an_unsampled_trace_records_nothing_but_keeps_its_id(tmp_path, sampled):
    """The caller's unsampled flag is followed; sample_ratio 0 samples no new trace."""
    stack, spans, usage = await traced_stack(tmp_path, sample_ratio=0.0)
    headers = {"traceparent": CALLER[:-2] + sampled} if sampled else {}
    try:
        answer = await embed(stack, ["quiet"], headers)
    finally:
        await stack.close()
    assert answer.status_code == 200 and spans.spans == []
    trace = parse(answer.headers["traceresponse"])
    assert trace is not None and not trace.sampled
    if sampled:
        assert trace.trace_id == CALLER_TRACE
    assert [e.trace_id for e in usage.events] == [f"{trace.trace_id:032x}"]


async def test_tracing_off_still_answers_the_trace_it_passed_on(stack):
    answer = await embed(stack, ["off"], {"traceparent": CALLER})
    assert answer.status_code == 200
    assert answer.headers["traceresponse"] == CALLER


class _Collector(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers["content-length"])
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_spans_are_posted_to_the_collector_as_otlp_json(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Collector.bodies = []
    exporter = OtlpExporter(
        f"http://127.0.0.1:{server.server_port}/v1/traces",
        {"service.name": "headway-gateway"},
        interval_s=60,  # only close() flushes: the test sees one post
    )
    stack = await make_stack(tmp_path, tracing=ProcessTracing(Tracer(exporter), exporter))
    try:
        assert (await embed(stack, ["exported"])).status_code == 200
    finally:
        await stack.close()  # the apps' shutdown closes the exporter: buffered spans go
        server.shutdown()
        server.server_close()
    posted = [
        span
        for body in _Collector.bodies
        for resource in msgspec.json.decode(body)["resourceSpans"]
        for span in resource["scopeSpans"][0]["spans"]
    ]
    assert {"POST /v1/embeddings", "POST /internal/embed", "model.run"} <= {
        span["name"] for span in posted
    }
    assert len({span["traceId"] for span in posted}) == 1
    assert exporter.exported == len(posted) and sum(exporter.dropped.values()) == 0
