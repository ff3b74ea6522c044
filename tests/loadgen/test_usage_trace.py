"""A trace from the ledger's usage rows: arrivals, lengths from tokens, deadlines per tier."""

import datetime as dt
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.billing.ledger.sqlite import SQLiteLedger
from headway.cli import app
from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.replay import plan_trace
from headway_tools.loadgen.trace import TraceRequest, load_trace
from headway_tools.loadgen.usage_trace import split_words, trace_from_ledger
from tests.builders import usage_event

T0 = dt.datetime(2026, 11, 1, 10, tzinfo=dt.UTC).timestamp()


async def a_ledger(path: Path) -> Path:
    """Five requests of three tenants, finished out of their arrival order."""
    events = [
        # arrived T0 + 1.0 (finished 1.5 s later), 3 texts of 52 tokens
        usage_event("r1", tenant="acme", texts=3, tokens=52, at=T0 + 2.5, total_s=1.5),
        # arrived first, T0 + 0.5
        usage_event("r2", tenant="zeta", texts=1, tokens=12, at=T0 + 0.52, total_s=0.02),
        usage_event(
            "r3", tenant="bulk", tier="batch", texts=2, tokens=3, at=T0 + 1.25, total_s=0.25
        ),
        usage_event(
            "r4", tenant="acme", endpoint="rerank", alias="rr", texts=2, tokens=40, at=T0 + 3.0
        ),
        usage_event("r5", tenant="acme", texts=0, tokens=0, at=T0 + 4.0),  # no text: skipped
    ]
    ledger = await SQLiteLedger.open(path)
    try:
        await ledger.apply(events, [])
    finally:
        await ledger.close()
    return path


def test_words_are_the_tokens_less_two_per_text_shared_evenly():
    assert split_words(52, 3) == (16, 15, 15)  # 52 - 6 = 46 words
    assert split_words(12, 1) == (10,)
    assert split_words(3, 2) == (1, 1)  # never less than a word a text
    assert sum(split_words(1000, 7)) == 1000 - 14


async def test_the_ledger_becomes_a_trace_in_arrival_order(tmp_path: Path):
    found = trace_from_ledger(await a_ledger(tmp_path / "ledger.sqlite3"))
    assert found.rows == 4  # the row without texts is not read
    assert found.trace.requests == (
        TraceRequest(0.0, "zeta", (10,), timeout_ms=1000),
        TraceRequest(pytest.approx(0.5), "acme", (16, 15, 15), timeout_ms=1000),
        TraceRequest(pytest.approx(0.5), "bulk", (1, 1), timeout_ms=10_000),
        TraceRequest(
            pytest.approx(2.48), "acme", (18, 18), timeout_ms=1000, endpoint="rerank", model="rr"
        ),
    )
    assert found.trace.duration_s == 3.0
    # It replays.
    plan = plan_trace(found.trace, {"zeta": "a", "acme": "b", "bulk": "c"})
    assert [r.path for r in plan.requests][-1] == "/v1/rerank"


async def test_tenants_window_and_tiers(tmp_path: Path):
    path = await a_ledger(tmp_path / "ledger.sqlite3")
    only = trace_from_ledger(path, tenants=["acme", "bulk"])
    assert [r.tenant for r in only.trace.requests] == ["acme", "bulk", "acme"]
    assert only.trace.requests[0].offset_s == 0.0  # from the first request it holds
    window = trace_from_ledger(path, start=T0 + 0.9, end=T0 + 2.0)
    assert [r.tenant for r in window.trace.requests] == ["acme", "bulk"]
    slow = trace_from_ledger(path, timeouts_ms={"interactive": 250})
    assert [r.timeout_ms for r in slow.trace.requests] == [250, 250, 250]
    assert slow.skipped == {"tier batch (no timeout given for it)": 1}
    with pytest.raises(InvalidSpec, match="no usage rows"):
        trace_from_ledger(path, start=T0 + 100)
    with pytest.raises(InvalidSpec, match="no ledger file"):
        trace_from_ledger(tmp_path / "missing.sqlite3")
    (tmp_path / "junk.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InvalidSpec, match="cannot read its usage rows"):
        trace_from_ledger(tmp_path / "junk.sqlite3")


async def test_the_command(tmp_path: Path):
    await a_ledger(tmp_path / "ledger.sqlite3")  # the data dir's default ledger
    out = tmp_path / "trace.jsonl"
    result = CliRunner().invoke(
        app,
        ["loadgen", "trace-from-usage", "--data-dir", str(tmp_path), "--out", str(out),
         "--start", "2026-11-01T10:00:00.9Z", "--batch-timeout-ms", "5000"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{out}: 3 requests over 2 s from 3 usage rows" in result.output
    trace = load_trace(out)
    assert [(r.tenant, r.timeout_ms) for r in trace.requests] == [
        ("acme", 1000),
        ("bulk", 5000),
        ("acme", 1000),
    ]
    result = CliRunner().invoke(
        app, ["loadgen", "trace-from-usage", "--ledger", str(out), "--out", str(out)]
    )
    assert result.exit_code == 2 and "cannot read its usage rows" in result.output
