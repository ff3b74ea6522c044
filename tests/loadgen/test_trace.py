"""The trace format: what a line may hold, and every way one is refused, naming its line."""

import json
from pathlib import Path

import pytest

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.trace import (
    Trace,
    TraceRequest,
    dump_trace,
    load_trace,
    parse_trace,
    write_trace,
)
from headway_tools.loadgen.workload import DEFAULT_MODEL

EXAMPLE = """\
{"headway_trace": 1, "duration_s": 2.5}
{"offset_s": 0.0123, "tenant": "search-app", "texts": 3, "lengths": [12, 40, 7], "timeout_ms": 1000}

{"offset_s": 0.045, "tenant": "nightly", "lengths": [8, 9], "timeout_ms": 10000, "class": "batch"}
{"offset_s": 2, "tenant": "shop", "lengths": [30], "endpoint": "rerank", "query_words": 6,\
 "model": "m"}
"""


def test_the_example_trace():
    trace = parse_trace(EXAMPLE.splitlines())
    assert trace == Trace(
        (
            TraceRequest(0.0123, "search-app", (12, 40, 7), timeout_ms=1000),
            TraceRequest(0.045, "nightly", (8, 9), timeout_ms=10000, class_name="batch"),
            TraceRequest(2.0, "shop", (30,), endpoint="rerank", model="m", query_words=6),
        ),
        duration_s=2.5,
    )
    assert [r.label for r in trace.requests] == ["search-app", "batch", "shop"]
    assert [r.texts for r in trace.requests] == [3, 2, 1]


def test_defaults_and_a_trace_without_a_header():
    trace = parse_trace(['{"offset_s": 3.25, "tenant": "t", "lengths": [1]}'])
    (request,) = trace.requests
    assert request == TraceRequest(3.25, "t", (1,))
    assert (request.timeout_ms, request.endpoint, request.model) == (
        1000,
        "embeddings",
        DEFAULT_MODEL,
    )
    assert trace.duration_s == 4.0  # to the whole second after the last offset
    assert parse_trace(['{"offset_s": 3, "tenant": "t", "lengths": [1]}']).duration_s == 4.0


def test_written_and_read_back_it_is_the_same_trace(tmp_path: Path):
    trace = parse_trace(EXAMPLE.splitlines())
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    assert load_trace(path) == trace
    lines = [json.loads(line) for line in dump_trace(trace)]
    assert lines[0] == {"headway_trace": 1, "duration_s": 2.5}
    # A field at its default is left out; texts is always written, for a reader's sake.
    assert lines[1] == {
        "offset_s": 0.0123,
        "tenant": "search-app",
        "texts": 3,
        "lengths": [12, 40, 7],
        "timeout_ms": 1000,
    }
    assert lines[3]["endpoint"] == "rerank" and lines[3]["query_words"] == 6


def test_offsets_survive_the_round_trip_to_the_last_bit():
    offsets = [0.1 + 0.2, 1 / 3, 2 / 3, 0.7000000000000001]
    requests = tuple(TraceRequest(o, "t", (4,)) for o in sorted(offsets))
    trace = Trace(requests, 1.0)
    assert parse_trace(dump_trace(trace)) == trace


GOOD = {"offset_s": 0.5, "tenant": "t", "lengths": [3]}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, not list"),
        ('"text"', "expected a JSON object, not str"),
        ({**GOOD, "tenat": "t"}, "unknown key 'tenat'"),
        ({**GOOD, "texts": 1, "key": "secret"}, "unknown key 'key'"),
        ({"tenant": "t", "lengths": [3]}, "missing 'offset_s'"),
        ({"offset_s": 0, "lengths": [3]}, "missing 'tenant'"),
        ({"offset_s": 0, "tenant": "t", "texts": 2}, "missing 'lengths'"),
        ({**GOOD, "offset_s": -0.1}, "offset_s: must be a finite number >= 0"),
        ({**GOOD, "offset_s": "0.5"}, "offset_s: expected a number of seconds"),
        ({**GOOD, "offset_s": True}, "offset_s: expected a number of seconds"),
        ('{"offset_s": NaN, "tenant": "t", "lengths": [3]}', "offset_s: must be a finite"),
        ('{"offset_s": Infinity, "tenant": "t", "lengths": [3]}', "offset_s: must be a finite"),
        ({**GOOD, "tenant": ""}, "tenant: expected a non-empty string"),
        ({**GOOD, "tenant": 7}, "tenant: expected a non-empty string"),
        ({**GOOD, "lengths": []}, "lengths must be a list of one or more"),
        ({**GOOD, "lengths": 3}, "lengths must be a list of one or more"),
        ({**GOOD, "lengths": [3, 0]}, "lengths: must be at least 1, not 0"),
        ({**GOOD, "lengths": [2.5]}, "lengths: expected an integer, not 2.5"),
        ({**GOOD, "lengths": [True]}, "lengths: expected an integer, not True"),
        ({**GOOD, "texts": 2}, "texts is 2 but lengths has 1"),
        ({**GOOD, "texts": True}, "texts: expected an integer"),
        ({**GOOD, "timeout_ms": 0}, "timeout_ms: must be at least 1"),
        ({**GOOD, "timeout_ms": 1.5}, "timeout_ms: expected an integer"),
        ({**GOOD, "endpoint": "chat"}, "endpoint must be one of embeddings, rerank, not 'chat'"),
        ({**GOOD, "query_words": 4}, "query_words is for endpoint 'rerank' only"),
        ({**GOOD, "endpoint": "rerank", "query_words": 0}, "query_words: must be at least 1"),
        ({**GOOD, "model": ""}, "model: expected a non-empty string"),
        ({**GOOD, "class": None}, "class: expected a non-empty string"),
    ],
)
def test_a_bad_line_is_refused_with_its_number(line, message):
    text = line if isinstance(line, str) else json.dumps(line)
    lines = [json.dumps(GOOD), "", text]  # the blank line counts: line numbers are the file's
    with pytest.raises(InvalidSpec, match=r"^trace line 3: ") as caught:
        parse_trace(lines)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [GOOD, {**GOOD, "offset_s": 0.25}],
            "trace line 2: offset_s 0.25 is before the previous line's 0.5",
        ),
        ([GOOD, {"headway_trace": 1, "duration_s": 5}], "trace line 2: the header must be"),
        ([{"headway_trace": 2, "duration_s": 5}], "trace line 1: headway_trace 2 is not 1"),
        ([{"headway_trace": 1}], "trace line 1: missing 'duration_s'"),
        ([{"headway_trace": 1, "duration_s": 0}], "trace line 1: duration_s must be positive"),
        ([{"headway_trace": 1, "duration_s": 5, "rps": 3}], "trace line 1: unknown key 'rps'"),
        ([{"headway_trace": 1, "duration_s": 0.5}, GOOD], "trace line 2: offset_s 0.5 is not"),
        ([], "trace: no requests and no header"),
    ],
)
def test_a_trace_that_breaks_its_order_or_header_is_refused(lines, message):
    with pytest.raises(InvalidSpec, match="^" + message):
        parse_trace([json.dumps(line) for line in lines])


def test_a_trace_of_only_a_header_is_a_pause():
    trace = parse_trace(['{"headway_trace": 1, "duration_s": 0.5}'])
    assert trace == Trace((), 0.5)


def test_errors_name_the_file(tmp_path: Path):
    path = tmp_path / "prod.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "tenat": "x"}) + "\n")
    with pytest.raises(InvalidSpec, match=rf"^{path}: trace line 2: unknown key 'tenat'"):
        load_trace(path)
    with pytest.raises(InvalidSpec, match="cannot read"):
        load_trace(tmp_path / "missing.jsonl")


def test_a_trace_built_in_code_is_checked_too():
    with pytest.raises(InvalidSpec, match="send order"):
        Trace((TraceRequest(1.0, "t", (1,)), TraceRequest(0.5, "t", (1,))), 2.0)
    with pytest.raises(InvalidSpec, match="not before"):
        Trace((TraceRequest(2.0, "t", (1,)),), 2.0)
    with pytest.raises(InvalidSpec, match="positive"):
        Trace((), 0.0)
