"""Each benchmark's ``render``, on made-up results: the sections docs/benchmarks.md shows.

The published sections are the reference: a rendered section has the same headings and
tables with the same columns, and the same prose once the figures are masked out (the
machine is the one they name).
"""

import re
from collections import Counter
from pathlib import Path

import pytest

from headway.models.evaluate import ModelComparison
from headway.settings import load_settings
from headway_tools.bench import (
    int8,
    overload_report,
    path,
    quota,
    routing_report,
    spine_report,
    tracing,
)
from headway_tools.bench.host import Machine
from headway_tools.bench.overload import GATEWAYS_SCENARIO, OverloadResults, Point
from headway_tools.bench.raw import RawPoint
from headway_tools.bench.routing import (
    SLOW_REPLICAS,
    FanOut,
    HedgeRun,
    KillRun,
    RoutingCounts,
    RoutingResults,
)
from headway_tools.bench.served import CLIENT, GATEWAY, WORKER, LoadPoint, Model, Overhead
from headway_tools.bench.spine import SpineResults
from headway_tools.bench.stats import markers
from headway_tools.loadgen import ClosedLoopResult, LoadResult, Record, Records, summarize
from headway_tools.loadgen.recorder import outcome_of

DOCS = Path(__file__).parents[3] / "docs" / "benchmarks.md"
MACHINE = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux 6.18.44-fc-v595", "3.11.7", 0.5)
COMMAND = "headway bench test --seconds 10"


def published(name: str) -> str:
    start, end = markers(name)
    return DOCS.read_text(encoding="utf-8").split(start)[1].split(end)[0]


def paragraphs(section: str) -> list[str]:
    return [p.strip() for p in section.strip().split("\n\n")]


def outline(section: str) -> list[str]:
    """Headings and the header row of every table, in order."""
    found = []
    for paragraph in paragraphs(section):
        first = paragraph.splitlines()[0]
        if first.startswith(("#", "|")):
            found.append(first)
    return found


def prose(section: str) -> list[str]:
    """The lines between the tables, figures, versions and the CPU's model masked, but for
    the command and the date."""
    masked = []
    for paragraph in paragraphs(section):
        if paragraph.startswith(("#", "|")):
            continue
        for line in paragraph.splitlines():
            if not line.startswith(("Command:", "Date:", "Commit:")):
                line = re.sub(r"`[0-9a-f]{12}`", "`VERSION`", line)
                line = re.sub(r"CPUs, [^;]+;", "CPUs, MODEL;", line)  # sections differ by run
                masked.append(re.sub(r"\d+(?:[.,]\d+)*", "#", line))
    return masked


def assert_like_the_published(section: str, name: str) -> None:
    assert outline(section) == outline(published(name))
    assert prose(section) == prose(published(name))
    assert f"Command: `{COMMAND}`" in section and MACHINE.date in section
    assert f"Commit: `{MACHINE.commit}` (CPU: {MACHINE.cpu_model})" in section


def load_result(outcomes: list[tuple[str, float, int]], duration_s: float) -> LoadResult:
    """Requests as (class, latency s, status), one every 10 ms of intended time."""
    rows = [
        Record(cls, (i / 100) % duration_s, 0.0, latency, status, outcome_of(status), 2, 1.0)
        for i, (cls, latency, status) in enumerate(outcomes)
    ]
    records = Records.from_records(rows)
    return LoadResult(records, summarize(records, duration_s))


# spine ------------------------------------------------------------------------------


def closed(texts: int, latencies_ms: list[float], errors: Counter[str] | None = None):
    """A 10 s closed-loop run of ``texts``-text requests answered in ``latencies_ms``."""
    answered = len(latencies_ms)
    latencies_s = [ms / 1000 for ms in latencies_ms]
    return ClosedLoopResult(answered, answered * texts, 10.0, latencies_s, errors or Counter())


def point(path: str, texts: int, result: ClosedLoopResult, note: str = "") -> LoadPoint:
    return LoadPoint(path, texts, 4, result, {WORKER: 9.0, GATEWAY: 1.0, CLIENT: 0.5}, note)


ONE_TO_A_HUNDRED_MS = [float(ms) for ms in range(1, 101)]


def spine_results(tmp_path) -> SpineResults:
    raw = [RawPoint(b, True, 80.0, 1.0 + b / 4, 1.02) for b in (1, 8, 32)]
    raw.append(RawPoint(32, False, 41.4, 1.0, 1.71))
    served = [
        point(path, b, closed(b, [50.0 * b] * 100))
        for path in (WORKER, GATEWAY)
        for b in (1, 8, 32)
    ]
    refused = closed(32, [400.0] * 50, Counter({"status 503 overloaded": 7}))
    served.append(point(GATEWAY, 32, refused, "admission on"))
    latency = {
        WORKER: point(WORKER, 1, closed(1, ONE_TO_A_HUNDRED_MS)),
        GATEWAY: point(GATEWAY, 1, closed(1, [ms + 1 for ms in ONE_TO_A_HUNDRED_MS])),
    }
    cpu = {
        WORKER: point(WORKER, 1, closed(1, [3.0] * 5000)),
        GATEWAY: point(GATEWAY, 1, closed(1, [4.0] * 2500)),
    }
    return SpineResults(
        "1.32.0",
        Model("all-MiniLM-L6-v2", "ca23eae9ab1f" + "0" * 52, 384),
        load_settings(flags={"data_dir": str(tmp_path)}),
        [13, 56, 98],
        raw,
        served,
        Overhead(latency, cpu),
    )


def test_the_spine_section_is_the_published_one(tmp_path):
    section = spine_report.render(full_spine(tmp_path), MACHINE, COMMAND, 10.0)
    assert_like_the_published(section, spine_report.SECTION)
    assert "| worker | 8 | 80.0 | 1.00× | 400.00 | 400.00 | 0.90 | 0.10 | 0.05 | 0 |" in section
    assert (
        "| gateway, admission on | 32 | 160 | 2.00× | 400.00 | 400.00 | 0.90 | 0.10 | 0.05 "
        "| 7 (status 503 overloaded: 7) |"
    ) in section
    assert "| worker, direct | 100 | 50.00 | 90.00 | 99.00 | 0 |" in section
    assert "| **added by the gateway** |  | **1.00** | **1.00** | **1.00** |  |" in section
    assert "| through the gateway | 250 | 400 | 3,600 | 200 | 0 |" in section


def replica_points() -> list[LoadPoint]:
    one = LoadPoint(
        GATEWAY,
        32,
        8,
        closed(32, [400.0] * 100),
        {WORKER: 10.0, GATEWAY: 0.2, CLIENT: 0.1},
        "1 embed replica",
    )
    two = LoadPoint(
        GATEWAY,
        32,
        8,
        closed(32, [200.0] * 190),
        {WORKER: 9.5, "worker-1": 9.5, GATEWAY: 0.4, CLIENT: 0.2},
        "2 embed replicas",
    )
    return [one, two]


def memory_rows():
    from headway_tools.bench.memory import ProcessMemory

    mb = 2**20
    heap = [
        ProcessMemory("embed-worker-0", 246 * mb, 195 * mb, 174 * mb, 21 * mb),
        ProcessMemory("gateway", 103 * mb, 71 * mb, 66 * mb, 5 * mb),
    ]
    mapped = [
        ProcessMemory("embed-worker-0", 200 * mb, 122 * mb, 77 * mb, 45 * mb),
        ProcessMemory("gateway", 103 * mb, 70 * mb, 66 * mb, 4 * mb),
    ]
    return [("heap", heap), ("mapped", mapped)]


def refusal_points():
    from headway_tools.bench.refusals import RefusalPoint

    return [
        RefusalPoint("429, quota used up", 30_000, Counter({"status 429": 30_000}), 41.25, 20, 10),
        RefusalPoint("503, pool full", 25_000, Counter({"status 503": 25_000}), 38.0, 21, 10),
    ]


def full_spine(tmp_path) -> SpineResults:
    from dataclasses import replace

    return replace(
        spine_results(tmp_path),
        refusals=refusal_points(),
        replicas=replica_points(),
        memory=memory_rows(),
    )


def test_the_spine_replica_and_memory_tables(tmp_path):
    section = spine_report.render(full_spine(tmp_path), MACHINE, COMMAND, 10.0)
    assert "### 4. Embed replicas on this machine" in section
    assert "| 1 embed replica | 320 | 1.00× | 400.00 | 400.00 | 1.00 | 0.02 | 0.01 | 0 |" in section
    assert (
        "| 2 embed replicas | 608 | 1.90× | 200.00 | 200.00 | 1.90 | 0.04 | 0.02 | 0 |" in section
    )
    assert "| embed-worker-0 | heap | 246.0 | 195.0 | 174.0 | 21.0 |" in section
    assert "| **all** | **mapped** | **303.0** | **192.0** | **143.0** | **49.0** |" in section


def test_the_spine_refusal_table(tmp_path):
    section = spine_report.render(full_spine(tmp_path), MACHINE, COMMAND, 10.0)
    assert "| 429, quota used up | 30,000 | 3,000 | 41.2 | 20.0 |" in section
    assert "| 503, pool full | 25,000 | 2,500 | 38.0 | 21.0 |" in section


def test_spine_refuses_to_run_for_no_time(tmp_path):
    from headway_tools.bench.spine import run_spine_bench

    with pytest.raises(ValueError, match="positive"):
        run_spine_bench(tmp_path, seconds=0)


# int8 -------------------------------------------------------------------------------


def test_the_int8_section_is_the_published_one():
    results = int8.Int8Results(
        int8.Variant("a" * 64, 90.9),
        int8.Variant("b" * 64, 45.1),
        ModelComparison(0.98765, 0.91, 0.876),
        [int8.Speed(b, 70.0, 105.0) for b in int8.BATCHES],
    )
    section = int8.render(results, MACHINE, COMMAND, 10.0)
    assert_like_the_published(section, int8.SECTION)
    assert "| 0.9877 | 0.9100 | 87.6% |" in section
    assert "| 32 | 70.0 | 105.0 | 1.50× |" in section


# quota ------------------------------------------------------------------------------


def test_the_quota_section_is_the_published_one():
    admission = quota.OverAdmission(800.0, 10.0, 2412, 3)
    results = quota.QuotaResults({quota.EMBEDDED: 2.04, quota.REDIS: 165.3}, admission)
    section = quota.render(results, MACHINE, COMMAND, 10.0)
    assert_like_the_published(section, quota.SECTION)
    assert "| Redis (Lua script, loopback) | 5,000 | 165.3 |" in section
    assert "| 2,412 | 2,400 | 1.005 | 3 |" in section


# overload ---------------------------------------------------------------------------


def overload_results() -> OverloadResults:
    capacity = {"synthetic": 144.2, "onnx": 79.2, "onnx, 2 replicas": 120.0}
    served = load_result([("interactive", 0.2, 200)] * 90 + [("interactive", 0.01, 503)] * 10, 1)
    mixed = load_result(
        [("interactive", 0.2, 200)] * 50 + [("batch", 2.0, 200), ("batch", 0.01, 503)] * 25, 1
    )
    points = [
        Point(scenario, admission, capacity["synthetic"], x, served)
        for scenario, x in (("synthetic, 2 replicas", 2.0), ("real model, 1 replica", 2.0))
        for admission in (True, False)
    ]
    cores = {"gateway": 1.1, "worker": 0.3, "client": 0.4}
    points += [
        Point(GATEWAYS_SCENARIO, True, capacity["synthetic"], x, served, gateways, cores)
        for gateways in (1, 3, 5)
        for x in (2.0, 5.0)
    ]
    points += [
        Point("noisy neighbour", a, capacity["synthetic"], 3.5, mixed) for a in (True, False)
    ]
    return OverloadResults(capacity, points)


def test_the_overload_section_is_the_published_one():
    section = overload_report.render(overload_results(), MACHINE, COMMAND, 30.0)
    assert_like_the_published(section, overload_report.SECTION)
    assert "Step 0.5×" not in section  # the settling table measured nothing: dropped
    assert "| on | batch | 50.0 | 25.0 | 0.0% | 50.0% | 0 |" in section
    assert (
        "| 3 | 5× | 100 | 90.0 | 62.4% | 10.0% | 0 | 0 | 200 | 200 | 40.0% | 1.10 / 0.30 / 0.40 |"
    ) in section


# routing ----------------------------------------------------------------------------


def routing_results() -> RoutingResults:
    def run(failures: int) -> LoadResult:
        outcomes = [("c", 0.1, 200)] * (300 - failures) + [("c", 0.01, 503)] * failures
        return load_result(outcomes, 3)

    kills = [
        KillRun(retries, admission, 124.4, 1.2, 2.4, run(failures))
        for retries, admission, failures in ((True, True, 3), (False, True, 9), (True, False, 0))
    ]
    fan_outs = [
        FanOut(1, 16, [0.857] * 30),
        FanOut(4, 16, [0.223] * 30),
        FanOut(4, 128, [0.754] * 30),
    ]
    hedges = []
    for slow in SLOW_REPLICAS:
        for hedging in (False, True):
            latency = 0.3 if hedging else 0.8
            result = load_result([("c", 0.1, 200)] * 98 + [("c", latency, 200)] * 2, 1)
            counts = RoutingCounts(1000, 0, 100 if hedging else 0, 40 if hedging else 0)
            hedges.append(HedgeRun(slow, hedging, 70.8, result, counts, 1050 if hedging else 1000))
    return RoutingResults(
        {1: 70.4, 2: 147.0, 3: 207.4, 4: 276.8},
        kills,
        fan_outs,
        {slow.name: 141.6 for slow in SLOW_REPLICAS},
        hedges,
    )


def test_the_routing_section_is_the_published_one():
    section = routing_report.render(routing_results(), MACHINE, COMMAND, 30.0)
    assert_like_the_published(section, routing_report.SECTION)
    killed = "| 1 | 100 | 0 | 100 ← killed | 100 | 0 | 100 ← killed | 100 | 0 | 100 ← killed |"
    assert killed in section
    restarted = (
        "| 2 | 97 | 3 | 100 ← restarted | 91 | 9 | 100 ← restarted | 100 | 0 | 100 ← restarted |"
    )
    assert restarted in section
    assert (
        "| retries off, admission on | 124.4 | 1.2 s / 2.4 s | 300 | 291 | 9 | 9 / 0 / 0 |"
        in section
    )
    assert "| 4 | 16 | 8 | 223 | 223 | 3.84× |" in section
    hedged = "| on | 70.8 | 100 | 0 | 100 | 100 | 300 | 300 | 2.67× | 10.0% (40 won) | +5.0% |"
    assert hedged in section


def test_the_hedge_p99_counts_timeouts_at_their_deadline_and_is_none_without_answers():
    (run, *_) = routing_results().hedges
    assert run.p99_ms() == pytest.approx(800)
    shed_only = load_result([("c", 0.01, 503)] * 5, 1)
    empty = HedgeRun(run.slow, False, 1.0, shed_only, run.counts, 0)
    assert empty.p99_ms() is None
    timed_out = load_result([("c", 0.1, 200)] * 90 + [("c", 1.0, 504)] * 10, 1)
    assert HedgeRun(run.slow, False, 1.0, timed_out, run.counts, 0).p99_ms() == 1000


# path -------------------------------------------------------------------------------


def test_the_path_section_is_the_published_one():
    points = [
        path.PathPoint(case, 5000, [180.0, 190.0, 200.0, 210.0, 250.0]) for case in path.cases()
    ]
    section = path.render(path.PathResults(points), MACHINE, COMMAND, 10.0)
    assert_like_the_published(section, path.SECTION)
    assert "| embeddings, 64 texts | 4 | 200 | 180–250 | 5,000 |" in section


def test_the_tracing_section_is_the_published_one():
    cases = [case for case in path.cases() if case.path == "/v1/embeddings"]
    points = [
        tracing.ModePoint(mode, case, [base * factor] * 5, [0.001] * 99 + [0.002], 5000)
        for case, base in zip(cases, (100.0, 800.0), strict=True)
        for (mode, _), factor in zip(tracing.MODES, (1.0, 1.05, 1.5), strict=True)
    ]
    served_case = path.Case("served, 1 text", "/v1/embeddings", b"", 1)
    served = [
        tracing.ModePoint(mode, served_case, [400.0 * factor] * 8, [0.01] * 99 + [0.02], 9000)
        for (mode, _), factor in zip(tracing.MODES, (1.0, 1.02, 1.1), strict=True)
    ]
    section = tracing.render(tracing.TracingResults(points, served, 12_345), MACHINE, COMMAND, 60.0)
    assert_like_the_published(section, tracing.SECTION)
    assert "| embeddings, 1 text | on, 100% sampled | 150 | 150–150 | +50.0% | 1.000 |" in section
    assert "| served, 1 text | on, 100% sampled | 440 | 440–440 | +10.0% | 10.000 |" in section
    assert tracing.paired_change([110, 90, 200], [100, 100, 100]) == pytest.approx(0.1)
