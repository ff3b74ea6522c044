"""A trace ↔ a plan: replayed bodies, keys, speed, and record → replay round trips."""

import json
from pathlib import Path

import pytest

from headway_tools.loadgen.corpus import WORDS
from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.plan import Plan, TimedRequest, plan_schedule
from headway_tools.loadgen.replay import load_keys, parse_keys, plan_trace, trace_of
from headway_tools.loadgen.schedule import Schedule, Step
from headway_tools.loadgen.trace import Trace, TraceRequest, dump_trace, parse_trace
from headway_tools.loadgen.workload import RequestClass, Workload

TRACE = Trace(
    (
        TraceRequest(0.0, "search-app", (12, 40, 7)),
        TraceRequest(0.1, "nightly", (8, 9), timeout_ms=10_000, class_name="batch"),
        TraceRequest(0.1, "search-app", (1,), model="synthetic"),
        TraceRequest(0.3, "shop", (30, 2), endpoint="rerank", query_words=6),
    ),
    duration_s=0.5,
)
KEYS = {"search-app": "k-search", "nightly": "k-nightly", "shop": "k-shop"}


def shape(trace: Trace) -> list[tuple[float, str, str, int, tuple[int, ...], int, str, str]]:
    """What a replay must reproduce of each request (everything but the texts)."""
    return [
        (r.offset_s, r.tenant, r.label, r.texts, r.lengths, r.timeout_ms, r.endpoint, r.model)
        for r in trace.requests
    ]


def test_each_line_becomes_one_request_with_texts_of_its_lengths():
    plan = plan_trace(TRACE, KEYS)
    assert plan.class_names == ("search-app", "batch", "shop")
    assert plan.duration_s == 0.5 and plan.arrivals == "replay"
    assert [(r.offset_s, r.class_index, r.tenant, r.key, r.texts) for r in plan.requests] == [
        (0.0, 0, "search-app", "k-search", 3),
        (0.1, 1, "nightly", "k-nightly", 2),
        (0.1, 0, "search-app", "k-search", 1),
        (0.3, 2, "shop", "k-shop", 2),
    ]
    assert [r.path for r in plan.requests] == ["/v1/embeddings"] * 3 + ["/v1/rerank"]
    assert [r.timeout_ms for r in plan.requests] == [1000, 10_000, 1000, 1000]
    bodies = [json.loads(r.body) for r in plan.requests]
    assert [[len(t.split()) for t in b["input"]] for b in bodies[:3]] == [[12, 40, 7], [8, 9], [1]]
    assert [b["model"] for b in bodies] == ["all-MiniLM-L6-v2"] * 2 + ["synthetic"] * 1 + [
        "all-MiniLM-L6-v2"
    ]
    rerank = bodies[3]
    assert set(rerank) == {"query", "documents", "model"}
    assert [len(d.split()) for d in rerank["documents"]] == [30, 2]
    assert len(rerank["query"].split()) == 6
    texts = [t for b in bodies[:3] for t in b["input"]] + rerank["documents"] + [rerank["query"]]
    assert len(set(texts)) == len(texts)  # none repeats: a content-keyed cache never hits
    assert {w for t in texts for w in t.split()} <= set(WORDS)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_texts():
    def bodies(seed: int) -> list[bytes]:
        return [r.body for r in plan_trace(TRACE, KEYS, seed=seed).requests]

    assert bodies(1) == bodies(1)
    assert bodies(1) != bodies(2)


def test_speed_divides_offsets_and_duration_but_not_deadlines():
    fast = plan_trace(TRACE, KEYS, speed=2.0)
    assert [r.offset_s for r in fast.requests] == [0.0, 0.05, 0.05, 0.15]
    assert fast.duration_s == 0.25
    assert [r.timeout_ms for r in fast.requests] == [1000, 10_000, 1000, 1000]
    slow = plan_trace(TRACE, KEYS, speed=0.5)
    assert [r.offset_s for r in slow.requests] == [0.0, 0.2, 0.2, 0.6] and slow.duration_s == 1.0
    for speed in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InvalidSpec, match="speed must be a positive number"):
            plan_trace(TRACE, KEYS, speed=speed)


def test_a_model_given_replaces_the_traces():
    plan = plan_trace(TRACE, KEYS, model="synthetic")
    assert {json.loads(r.body)["model"] for r in plan.requests} == {"synthetic"}


def test_every_tenant_needs_a_key():
    with pytest.raises(InvalidSpec, match="no API key for tenant 'nightly', 'shop'"):
        plan_trace(TRACE, {"search-app": "k"})


def test_a_synthetic_run_recorded_replays_to_the_same_offered_load():
    workload = Workload(
        (
            RequestClass("interactive", "k1", texts=(1, 4), words=(1, 30), timeout_ms=500),
            RequestClass("batch", "k2", weight=0.5, texts=(8, 16), model="synthetic"),
        ),
        seed=4,
    )
    schedule = Schedule((Step(1.0, 300), Step(0.5, 0), Step(1.0, 50)), arrivals="poisson", seed=4)
    recorded = trace_of(plan_schedule(workload, schedule))
    assert len(recorded.requests) > 300 and recorded.duration_s == 2.5
    assert {r.tenant for r in recorded.requests} == {"interactive", "batch"}
    # Through the file format, then replayed, then recorded again: nothing moved.
    replayed = plan_trace(parse_trace(dump_trace(recorded)), {"interactive": "a", "batch": "b"})
    again = trace_of(replayed)
    assert again == recorded
    assert shape(again) == shape(recorded)
    original = list(schedule.offsets())
    assert [r.offset_s for r in again.requests] == original
    # The synthetic bodies' own texts and lengths are what was recorded.
    sent = [json.loads(p.body)["input"] for p in workload.prepare(len(original))]
    assert [r.lengths for r in recorded.requests] == [
        tuple(len(t.split()) for t in texts) for texts in sent
    ]


def test_a_recorded_replay_holds_the_offsets_it_sent():
    fast = trace_of(plan_trace(TRACE, KEYS, speed=2.0))
    assert [r.offset_s for r in fast.requests] == [0.0, 0.05, 0.05, 0.15]
    assert fast.duration_s == 0.25
    assert [r.lengths for r in fast.requests] == [r.lengths for r in TRACE.requests]
    assert [r.query_words for r in fast.requests][3] == 6
    assert fast == Trace(
        tuple(
            TraceRequest(
                r.offset_s / 2,
                r.tenant,
                r.lengths,
                r.timeout_ms,
                r.endpoint,
                r.model,
                r.label,
                r.query_words,
            )
            for r in TRACE.requests
        ),
        0.25,
    )


def test_what_cannot_be_recorded_says_which_request():
    def plan(path: str, body: bytes) -> Plan:
        request = TimedRequest(0.0, 0, "t", "k", path, 1000, 1, body)
        return Plan(("t",), [request], 1.0, "fixed")

    with pytest.raises(InvalidSpec, match="request 0: cannot record a request to /v1/other"):
        trace_of(plan("/v1/other", b"{}"))
    with pytest.raises(InvalidSpec, match="request 0: cannot record its body"):
        trace_of(plan("/v1/embeddings", b'{"input": ["a b"]}'))
    with pytest.raises(InvalidSpec, match="one or more words"):
        trace_of(plan("/v1/embeddings", b'{"model": "m", "input": ["a", ""]}'))


def test_keys_from_flags():
    assert parse_keys(["a=k1", "b=k=2", "a=k1"]) == {"a": "k1", "b": "k=2"}
    for bad in ("a", "=k", "a="):
        with pytest.raises(InvalidSpec, match="expected TENANT=KEY"):
            parse_keys([bad])
    with pytest.raises(InvalidSpec, match="two keys"):
        parse_keys(["a=k1", "a=k2"])


def test_keys_from_a_file(tmp_path: Path):
    toml = tmp_path / "keys.toml"
    toml.write_text('search-app = "k1"\nnightly = "k2"\n')
    assert load_keys(toml) == {"search-app": "k1", "nightly": "k2"}
    as_json = tmp_path / "keys.json"
    as_json.write_text('{"a": "k"}')
    assert load_keys(as_json) == {"a": "k"}
    as_json.write_text('["k"]')
    with pytest.raises(InvalidSpec, match="expected a table"):
        load_keys(as_json)
    as_json.write_text('{"a": 3}')
    with pytest.raises(InvalidSpec, match="a: expected an API key string"):
        load_keys(as_json)
    toml.write_text("a = ")
    with pytest.raises(InvalidSpec, match="not valid TOML"):
        load_keys(toml)
    with pytest.raises(InvalidSpec, match="cannot read"):
        load_keys(tmp_path / "missing.toml")


def test_a_plan_checks_its_offsets():
    def request(offset: float) -> TimedRequest:
        return TimedRequest(offset, 0, "t", "k", "/v1/embeddings", 1000, 1, b"{}")

    with pytest.raises(InvalidSpec, match="non-decreasing"):
        Plan(("t",), [request(0.5), request(0.2)], 1.0, "replay")
    with pytest.raises(InvalidSpec, match="within the run"):
        Plan(("t",), [request(1.0)], 1.0, "replay")
    with pytest.raises(InvalidSpec, match="positive"):
        Plan(("t",), [], 0.0, "replay")
