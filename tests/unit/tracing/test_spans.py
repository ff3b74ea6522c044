"""Spans: sampling decided once per trace, children found through the context, no cost off."""

import asyncio

from headway.tracing.memory import MemorySink
from headway.tracing.spans import (
    NOOP,
    Remote,
    Span,
    SpanKind,
    Tracer,
    current_trace_id,
    current_traceparent,
    record,
    span,
)
from headway.tracing.traceparent import parse

INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def counter_bits():
    values = iter(range(1, 10_000))
    return lambda bits: next(values)


def test_off_nothing_is_recorded_but_the_callers_trace_is_passed_on():
    tracer = Tracer()
    with tracer.server(INCOMING, "POST") as server:
        assert isinstance(server, Remote)
        assert span("child") is NOOP
        assert current_traceparent() == INCOMING
        assert current_trace_id() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert current_traceparent() is None


def test_off_a_request_without_traceparent_still_gets_a_trace_id_passed_on_unsampled():
    with Tracer().server(None, "POST"):
        sent = parse(current_traceparent())
    assert sent is not None and sent.sampled is False and sent.trace_id != 0


def test_on_the_callers_trace_is_continued_and_children_nest_through_the_context():
    sink = MemorySink()
    tracer = Tracer(sink)
    with tracer.server(INCOMING, "POST /v1/embeddings") as server:
        assert isinstance(server, Span)
        with span("outer"), span("inner", kind=SpanKind.CLIENT) as inner:
            sent = parse(current_traceparent())
    assert sent == (server.trace_id, inner.span_id, True)
    by_name = {s.name: s for s in sink.spans}
    assert list(by_name) == ["inner", "outer", "POST /v1/embeddings"]  # in the order they end
    assert by_name["POST /v1/embeddings"].parent_id == 0x00F067AA0BA902B7
    assert by_name["outer"].parent_id == server.span_id
    assert by_name["inner"].parent_id == by_name["outer"].span_id
    assert {s.trace_id for s in sink.spans} == {0x4BF92F3577B34DA6A3CE929D0E0E4736}
    assert all(s.end_ns >= s.start_ns > 0 for s in sink.spans)


def test_a_caller_that_did_not_sample_is_followed():
    sink = MemorySink()
    with Tracer(sink).server(INCOMING[:-2] + "00", "POST") as server:
        assert span("child") is NOOP
        assert current_traceparent() == INCOMING[:-2] + "00"  # passed on as it came
    assert not server.recording and sink.spans == []


def test_new_traces_are_sampled_by_the_low_bits_of_their_id():
    sink = MemorySink()
    low, high = 2**64 // 4, 2**64 // 4 * 3
    ids = iter([low, 7, high, 8])  # trace id, span id, trace id, span id
    tracer = Tracer(sink, sample_ratio=0.5, random_bits=lambda bits: next(ids))
    with tracer.server(None, "kept"):
        pass
    with tracer.server(None, "dropped") as dropped:
        pass
    assert [s.name for s in sink.spans] == ["kept"]
    assert isinstance(dropped, Remote) and dropped.trace_id == high


def test_a_failure_marks_the_span_with_its_error_type():
    sink = MemorySink()
    tracer = Tracer(sink)
    with tracer.server(None, "POST"):
        try:
            with span("quota"):
                raise KeyError("x")
        except KeyError:
            pass
    assert sink.named("quota")[0].error == "KeyError"


async def test_tasks_started_inside_a_span_are_its_children():
    sink = MemorySink()

    async def attempt(n):
        with span(f"attempt {n}"):
            await asyncio.sleep(0)

    with Tracer(sink).server(None, "POST") as server:
        await asyncio.gather(attempt(1), attempt(2))
    assert {s.parent_id for s in sink.spans if s.name.startswith("attempt")} == {server.span_id}


def test_spans_recorded_after_the_fact_keep_their_times_and_parent():
    sink = MemorySink()
    with Tracer(sink, random_bits=counter_bits()).server(None, "POST") as server:
        batch = record("batch", 100, 200, {"headway.batch.texts": 3})
        record("model.run", 150, 200, parent=batch)
    assert batch is not None and batch.parent_id == server.span_id
    run = sink.named("model.run")[0]
    assert (run.start_ns, run.end_ns, run.parent_id) == (150, 200, batch.span_id)
    assert record("outside", 1, 2) is None  # no request: nothing to record under
