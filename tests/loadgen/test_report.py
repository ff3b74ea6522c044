import json

import pytest

from headway_tools.loadgen.errors import MalformedReport
from headway_tools.loadgen.recorder import ClientStats, Records, summarize
from headway_tools.loadgen.report import from_json, render_text, to_json
from tests.loadgen.test_recorder import record


def a_report(*, behind: bool = False):
    rows = [
        *(record(cls="interactive", at=0.1 * i, latency=0.02, texts=3) for i in range(15)),
        record(cls="batch", at=1.2, status=503, latency=0.001, lag=0.06 if behind else 0.0),
        record(cls="batch", at=1.3, status=0, failure="error", error="connection lost: reset"),
    ]
    client = ClientStats(
        target="http://127.0.0.1:8080",
        arrivals="fixed",
        wall_s=2.1,
        cpu_s=0.01,
        requests=len(rows),
        connections_opened=2,
        peak_connections=2,
        connect_failures=0,
    )
    return summarize(Records.from_records(rows), 1.5, client)


def test_json_round_trips():
    report = a_report()
    document = json.loads(json.dumps(to_json(report), allow_nan=False))
    assert from_json(document) == report
    assert document["overall"]["served_rps"] == pytest.approx(10)
    assert document["classes"][1]["latency_p50_ms"] is None
    assert document["client"]["cpu_us_per_request"] == pytest.approx(10_000 / 17)
    assert document["error_reasons"] == {"connection lost: reset": 1}


def test_json_round_trips_without_client_stats():
    report = summarize(Records.from_records([record()]), 1.0)
    assert from_json(json.loads(json.dumps(to_json(report)))) == report


def test_a_document_that_is_not_a_report_is_refused():
    document = to_json(a_report())
    del document["overall"]["served"]
    with pytest.raises(MalformedReport, match="served"):
        from_json(document)


def test_text_has_the_overall_classes_and_timeline():
    text = render_text(a_report())
    lines = text.splitlines()
    assert lines[0].startswith("target http://127.0.0.1:8080")
    assert "schedule kept" in lines[1]
    table = {line.split()[0]: line.split() for line in lines if line and line[0] != " "}
    assert table["overall"][1:8] == ["17", "15", "15", "1", "0", "0", "1"]
    assert table["interactive"][1] == "15" and table["batch"][1] == "2"
    assert table["0s"][1] == "10" and table["1s"][1] == "7"
    assert "connection lost: reset" in text


def test_text_says_when_the_generator_fell_behind():
    assert "BEHIND SCHEDULE" in render_text(a_report(behind=True))
