"""A load seen in production, replayed: ``headway up`` serves a recorded run, its usage
rows become a trace (``loadgen trace-from-usage``), and the trace replays against it."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway_tools.loadgen.trace import load_trace
from tests.e2e.conftest import start_up, wait_for

pytestmark = pytest.mark.e2e

SPEC = """
arrivals = "fixed"
[[class]]
name = "search-app"
key = "demo-key-search-app"
model = "synthetic"
texts = [1, 4]
words = [3, 30]
[[class]]
name = "support-bot"
key = "demo-key-support-bot"
model = "synthetic"
texts = [2, 6]
[[step]]
seconds = 2
rps = 10
"""


def loadgen(*args: str) -> str:
    result = CliRunner().invoke(app, ["loadgen", *args])
    assert result.exit_code == 0, result.output
    return result.output


def metered(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as db:
        try:
            return int(db.execute("SELECT count(*) FROM processed_requests").fetchone()[0])
        except sqlite3.OperationalError:  # the consumer has not created its tables yet
            return 0


def test_a_metered_run_replays_from_its_usage(tmp_path: Path):
    data_dir = tmp_path / "data"
    spec, sent, usage = tmp_path / "load.toml", tmp_path / "sent.jsonl", tmp_path / "usage.jsonl"
    spec.write_text(SPEC)
    up = start_up(
        data_dir, "--backend", "synthetic", "--embed-replicas", "2", "--rerank-replicas", "0"
    )
    try:
        first = tmp_path / "first.json"
        loadgen("--url", up.url, "--spec", str(spec), "--record", str(sent), "--json", str(first))
        assert json.loads(first.read_text())["overall"]["served"] == 20
        wait_for(lambda: metered(data_dir / "ledger.sqlite3") == 20, 60, "20 usage rows")
        loadgen("trace-from-usage", "--data-dir", str(data_dir), "--out", str(usage))
        recorded, from_usage = load_trace(sent), load_trace(usage)
        # The same requests, tenant by tenant, text by text (20 sends 100 ms apart keep
        # their order through the gateway); the synthetic model's tokens are its words
        # plus two, so each request's words add up to what was sent.
        assert [(r.tenant, r.texts) for r in from_usage.requests] == [
            (r.tenant, r.texts) for r in recorded.requests
        ]
        assert [sum(r.lengths) for r in from_usage.requests] == [
            sum(r.lengths) for r in recorded.requests
        ]
        assert {r.model for r in from_usage.requests} == {"synthetic"}
        assert [r.timeout_ms for r in from_usage.requests] == [
            r.timeout_ms for r in recorded.requests
        ]
        replayed = tmp_path / "replayed.json"
        loadgen(
            "--url", up.url, "--replay", str(usage), "--speed", "2", "--json", str(replayed),
            "--key", "search-app=demo-key-search-app",
            "--key", "support-bot=demo-key-support-bot",
        )  # fmt: skip
        report = json.loads(replayed.read_text())
        assert report["overall"]["offered"] == report["overall"]["served"] == 20
        assert {c["name"] for c in report["classes"]} == {"search-app", "support-bot"}
        wait_for(lambda: metered(data_dir / "ledger.sqlite3") == 40, 60, "40 usage rows")
        # Rerank lines replay too (served by cosine on the embed workers here).
        rerank = tmp_path / "rerank.jsonl"
        line = {"tenant": "search-app", "lengths": [5, 9, 3], "endpoint": "rerank"}
        rerank.write_text("".join(json.dumps(line | {"offset_s": i / 10}) + "\n" for i in range(5)))
        loadgen(
            "--url", up.url, "--replay", str(rerank), "--model", "synthetic",
            "--key", "search-app=demo-key-search-app", "--json", str(replayed),
        )  # fmt: skip
        assert json.loads(replayed.read_text())["overall"]["served"] == 5
    finally:
        up.stop(signal.SIGTERM)
