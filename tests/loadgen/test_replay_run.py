"""Replays and recordings through the real runner, against in-test servers on 127.0.0.1,
and through the ``headway loadgen`` command line."""

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from headway.cli import app
from headway_tools.loadgen.replay import plan_trace
from headway_tools.loadgen.run import run_plan
from headway_tools.loadgen.trace import Trace, TraceRequest, load_trace
from tests.loadgen.servers import ScriptedServer


def a_trace(seconds: float, rps: float, tenants: tuple[str, ...]) -> Trace:
    count = int(seconds * rps)
    return Trace(
        tuple(
            TraceRequest(i / rps, tenants[i % len(tenants)], (3,) * (1 + i % 3), timeout_ms=500)
            for i in range(count)
        ),
        seconds,
    )


async def test_a_replay_sends_each_request_at_its_offset_as_its_tenant(scripted: ScriptedServer):
    trace = a_trace(0.6, 100, ("search", "bulk", "over"))
    keys = {"search": "ok", "bulk": "shed", "over": "quota"}
    result = await run_plan(scripted.url, plan_trace(trace, keys), client_timeout_s=2.0)
    records, report = result.records, result.report
    assert np.array_equal(records.intended_s, [r.offset_s for r in trace.requests])
    assert records.texts.tolist() == [r.texts for r in trace.requests]
    assert scripted.received == [keys[r.tenant] for r in trace.requests]  # sent in order
    by_class = {s.name: s for s in report.classes}
    assert list(by_class) == ["search", "bulk", "over"]
    assert (by_class["search"].served, by_class["bulk"].shed, by_class["over"].quota) == (
        20,
        20,
        20,
    )
    assert report.duration_s == 0.6 and report.client is not None
    assert report.client.arrivals == "replay"
    assert (records.deadline_s == 0.5).all()
    assert (records.lag_s >= 0).all()  # nothing leaves before its time


async def test_speed_compresses_the_replay(scripted: ScriptedServer):
    trace = a_trace(0.8, 50, ("search",))
    result = await run_plan(
        scripted.url, plan_trace(trace, {"search": "ok"}, speed=4.0), client_timeout_s=2.0
    )
    records, report = result.records, result.report
    assert np.array_equal(records.intended_s, [r.offset_s / 4 for r in trace.requests])
    assert report.duration_s == 0.2 and report.overall.served == 40
    assert report.overall.offered_rps == pytest.approx(200)  # 4 × the trace's 50/s
    assert report.client is not None and report.client.wall_s >= 0.2 - 1e-3


@pytest.fixture
def threaded_server() -> Iterator[ScriptedServer]:
    """A ``ScriptedServer`` on its own event loop in a thread, for the command line."""
    loop = asyncio.new_event_loop()
    server = ScriptedServer()
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, name="scripted-server")
    thread.start()
    yield server
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def loadgen(*args: str) -> str:
    result = CliRunner().invoke(app, ["loadgen", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_command_line_records_and_replays_the_same_load(
    threaded_server: ScriptedServer, tmp_path: Path
):
    url = threaded_server.url
    first, second, report = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "r.json"
    loadgen("--url", url, "--rate", "40", "--duration", "0.5", "--texts", "1-3", "--key", "ok",
            "--record", str(first))  # fmt: skip
    recorded = load_trace(first)
    assert len(recorded.requests) == len(threaded_server.received) > 0
    assert {r.tenant for r in recorded.requests} == {"default"}  # the class, never the key
    assert '"ok"' not in first.read_text()
    (tmp_path / "keys.toml").write_text('default = "shed"\n')
    loadgen("--url", url, "--replay", str(first), "--keys", str(tmp_path / "keys.toml"),
            "--key", "default=ok", "--record", str(second), "--json", str(report))  # fmt: skip
    assert second.read_text() == first.read_text()
    overall = json.loads(report.read_text())["overall"]
    assert overall["offered"] == overall["served"] == len(recorded.requests)  # --key beat --keys
    assert threaded_server.received == ["ok"] * (2 * len(recorded.requests))


def test_the_command_line_refuses_what_it_cannot_replay(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"offset_s": 0, "tenant": "t", "lengths": [2], "tenat": 1}\n')
    runner = CliRunner()
    result = runner.invoke(app, ["loadgen", "--replay", str(trace), "--key", "t=k"])
    assert result.exit_code == 2
    assert "trace line 1: unknown key 'tenat'" in result.output
    trace.write_text('{"offset_s": 0, "tenant": "t", "lengths": [2]}\n')
    result = runner.invoke(app, ["loadgen", "--replay", str(trace)])
    assert result.exit_code == 2 and "no API key for tenant 't'" in result.output
    result = runner.invoke(app, ["loadgen", "--replay", str(trace), "--key", "t"])
    assert result.exit_code == 2 and "expected TENANT=KEY" in result.output
    result = runner.invoke(app, ["loadgen", "--key", "a", "--key", "b"])
    assert result.exit_code == 2 and "one API key" in result.output
    result = runner.invoke(app, ["loadgen", "--speed", "2"])
    assert result.exit_code == 2 and "--speed do not apply" in result.output
    result = runner.invoke(app, ["loadgen", "--replay", str(trace), "--spec", str(trace)])
    assert result.exit_code == 2 and "give one" in result.output
