"""The exporter's posting: batches, retries as OTLP/HTTP asks, drops counted by reason."""

import asyncio
import email.utils

import msgspec
import pytest

from headway.otlp.exporter import OtlpExporter, RetryPolicy, retry_after_s
from headway.tracing.memory import MemorySink
from headway.tracing.spans import Span, Tracer, span
from headway.transport.base import ConnectFailed, Reply, UpstreamRequest
from headway.transport.mock import MockTransport

ENDPOINT = "http://collector:4318/v1/traces"
QUICK = RetryPolicy(max_attempts=3, backoff_s=0.001, max_backoff_s=0.004)


def request_spans(children: int = 2) -> list[Span]:
    """One request's spans as its root hands them over: the children, then the root."""
    sink = MemorySink()
    with Tracer(sink).server(None, "POST /v1/embeddings"):
        for n in range(children):
            with span(f"stage {n}"):
                pass
    return sink.spans


def posted_spans(transport: MockTransport) -> list[list[str]]:
    return [
        [
            s["name"]
            for r in msgspec.json.decode(request.body)["resourceSpans"]
            for s in r["scopeSpans"][0]["spans"]
        ]
        for request in transport.requests
    ]


class Answers:
    """Answers each post with the next of ``replies`` (a Reply, or an exception to raise),
    the last one for ever after."""

    def __init__(self, *replies: Reply | Exception) -> None:
        self.replies = list(replies)

    def __call__(self, request: UpstreamRequest) -> Reply:
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply


OK = Reply(200, b"{}", {})


async def test_a_request_s_spans_go_in_one_post_to_the_collector_path():
    transport = MockTransport(Answers(OK))
    exporter = OtlpExporter(ENDPOINT, {"service.name": "t"}, transport=transport, retry=QUICK)
    exporter.export(request_spans())
    assert exporter.pending == 3 and not transport.requests  # encoded, waiting
    await exporter.flush()
    (request,) = transport.requests
    assert (request.method, request.base_url, request.path) == (
        "POST",
        "http://collector:4318",
        "/v1/traces",
    )
    assert request.content_type == "application/json"
    assert posted_spans(transport) == [["stage 0", "stage 1", "POST /v1/embeddings"]]
    assert exporter.exported == 3 and exporter.pending == 0 and exporter.failures == 0


async def test_batches_hold_at_most_batch_spans_whole_requests():
    transport = MockTransport(Answers(OK))
    exporter = OtlpExporter(
        ENDPOINT, {}, transport=transport, batch_spans=6, retry=QUICK, interval_s=60
    )
    for _ in range(5):
        exporter.export(request_spans())  # 3 spans each
    await exporter.flush()
    assert [len(names) for names in posted_spans(transport)] == [6, 6, 3]
    assert exporter.exported == 15


async def test_the_started_task_posts_once_a_batch_is_waiting():
    posted = asyncio.Event()

    def answer(request: UpstreamRequest) -> Reply:
        posted.set()
        return OK

    transport = MockTransport(answer)
    exporter = OtlpExporter(
        ENDPOINT, {}, transport=transport, batch_spans=6, retry=QUICK, interval_s=60
    )
    exporter.start()
    try:
        exporter.export(request_spans())
        for _ in range(20):
            await asyncio.sleep(0)  # the task runs, and finds 3 of 6: it waits 60 s
        assert not transport.requests
        exporter.export(request_spans())
        async with asyncio.timeout(5):
            await posted.wait()
    finally:
        await exporter.close()
    assert posted_spans(transport) == [["stage 0", "stage 1", "POST /v1/embeddings"] * 2]
    assert exporter.exported == 6


async def test_a_full_buffer_drops_and_counts_never_blocks():
    transport = MockTransport(Answers(OK))
    exporter = OtlpExporter(ENDPOINT, {}, transport=transport, max_spans=7, retry=QUICK)
    for _ in range(3):
        exporter.export(request_spans())
    assert exporter.pending == 6 and exporter.dropped["buffer_full"] == 3
    await exporter.flush()
    assert exporter.exported == 6


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_a_retryable_answer_is_retried_after_the_collector_s_retry_after(status):
    transport = MockTransport(Answers(Reply(status, b"", {"retry-after": "0"}), OK))
    draws: list[float] = []
    exporter = OtlpExporter(
        ENDPOINT, {}, transport=transport, retry=QUICK, random_draw=lambda: draws.append(1) or 1
    )
    exporter.export(request_spans())
    await exporter.flush()
    assert len(transport.requests) == 2 and transport.requests[0].body == transport.requests[1].body
    assert exporter.exported == 3 and exporter.failures == 1
    assert draws == []  # Retry-After was followed: no backoff drawn


async def test_a_refused_connection_is_retried_with_backoff_then_dropped():
    transport = MockTransport(Answers(ConnectFailed("refused")))
    exporter = OtlpExporter(ENDPOINT, {}, transport=transport, retry=QUICK)
    exporter.export(request_spans())
    await exporter.flush()
    assert len(transport.requests) == QUICK.max_attempts
    assert exporter.failures == QUICK.max_attempts and exporter.exported == 0
    assert exporter.dropped["export_failed"] == 3


@pytest.mark.parametrize("status", [400, 401, 404, 413, 500])
async def test_an_answer_otlp_calls_final_drops_the_batch_at_once(status):
    transport = MockTransport(Answers(Reply(status, b"", {})))
    exporter = OtlpExporter(ENDPOINT, {}, transport=transport, retry=QUICK)
    exporter.export(request_spans())
    await exporter.flush()
    assert len(transport.requests) == 1
    assert exporter.dropped["export_failed"] == 3 and exporter.failures == 1


async def test_a_partial_success_counts_its_rejected_spans():
    reply = Reply(200, b'{"partialSuccess":{"rejectedSpans":"2","errorMessage":"too old"}}', {})
    exporter = OtlpExporter(ENDPOINT, {}, transport=MockTransport(Answers(reply)), retry=QUICK)
    exporter.export(request_spans())
    await exporter.flush()
    assert exporter.exported == 1 and exporter.dropped["rejected"] == 2


async def test_close_posts_what_is_left_once_without_waiting_out_a_backoff():
    slow = RetryPolicy(max_attempts=5, backoff_s=60, max_backoff_s=60)
    transport = MockTransport(Answers(Reply(503, b"", {})))
    exporter = OtlpExporter(ENDPOINT, {}, transport=transport, retry=slow)
    exporter.start()
    exporter.export(request_spans())
    async with asyncio.timeout(5):
        await exporter.close()
    assert len(transport.requests) == 1
    assert exporter.dropped["export_failed"] == 3


async def test_close_lets_the_post_in_flight_land_and_posts_the_rest():
    """SIGTERM while the task posts: that batch is neither lost nor sent twice."""
    in_flight, answer = asyncio.Event(), asyncio.Event()

    async def slow(request: UpstreamRequest) -> Reply:
        in_flight.set()
        await answer.wait()
        return OK

    transport = MockTransport(slow)
    exporter = OtlpExporter(ENDPOINT, {}, transport=transport, batch_spans=3, retry=QUICK)
    exporter.start()
    exporter.export(request_spans())  # a full batch: the task posts it
    async with asyncio.timeout(5):
        await in_flight.wait()
        exporter.export(request_spans())  # waits in the buffer
        closing = asyncio.create_task(exporter.close())
        await asyncio.sleep(0)
        answer.set()
        await closing
    assert [len(names) for names in posted_spans(transport)] == [3, 3]
    assert exporter.exported == 6 and exporter.pending == 0


async def test_close_during_a_backoff_posts_that_batch_once_more():
    slow = RetryPolicy(max_attempts=5, backoff_s=60, max_backoff_s=60)
    answers = Answers(Reply(503, b"", {}), OK)
    refused = asyncio.Event()

    def answer(request: UpstreamRequest) -> Reply:
        refused.set()
        return answers(request)

    transport = MockTransport(answer)
    exporter = OtlpExporter(
        ENDPOINT, {}, transport=transport, batch_spans=3, retry=slow, random_draw=lambda: 1
    )
    exporter.start()
    exporter.export(request_spans())  # a full batch: the task posts it, is refused, waits 60 s
    async with asyncio.timeout(5):
        await refused.wait()
        await exporter.close()
    assert len(transport.requests) == 2
    assert exporter.exported == 3 and exporter.failures == 1 and exporter.pending == 0


def test_backoff_doubles_with_full_jitter_up_to_its_cap_and_retry_after_wins():
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=8, max_retry_after_s=30)
    assert [policy.delay_s(retry, None, 1.0) for retry in range(1, 7)] == [0.5, 1, 2, 4, 8, 8]
    assert policy.delay_s(3, None, 0.25) == 0.5
    assert policy.delay_s(1, 12.0, 1.0) == 12.0
    assert policy.delay_s(1, 3600.0, 1.0) == 30.0


def test_retry_after_reads_seconds_and_http_dates():
    now = 1_800_000_000.0
    assert retry_after_s(None, now) is None
    assert retry_after_s("7", now) == 7.0
    assert retry_after_s(email.utils.formatdate(now + 20, usegmt=True), now) == 20.0
    assert retry_after_s(email.utils.formatdate(now - 20, usegmt=True), now) == 0.0
    assert retry_after_s("soon", now) is None
