"""``headway bench billing``: its pure figures and its section, from made-up results."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest

from headway.metering.event import UsageEvent, decode, encode
from headway_tools.bench import billing_report
from headway_tools.bench.billing import (
    CLIENT,
    CONSUMER,
    GATEWAY,
    JETSTREAM_POSTGRES,
    NATS,
    NO_METERING,
    OUTBOX,
    OUTBOX_SQLITE,
    RELAY,
    WORKER,
    BillingResults,
    CpuPoint,
    DrainPoint,
    DrainRun,
    EndToEnd,
    NoSink,
    Spread,
    WritePoint,
    WriteRun,
    median_and_range,
    record_open_loop,
    spread,
    usage_event,
)
from headway_tools.bench.host import Machine
from headway_tools.loadgen import Summary

MACHINE = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux 6.1", "3.11.7", 0.5)
COMMAND = "headway bench billing --seconds 10"
MS = 0.001


def summary(offered: int, served: int, *, timeouts: int = 0, shed: int = 0) -> Summary:
    return Summary(
        name="overall",
        start_s=0.0,
        seconds=20.0,
        offered=offered,
        served=served,
        goodput=served,
        shed=shed,
        quota=0,
        timeouts=timeouts,
        errors=0,
        served_texts=served,
        latency_p50_ms=3.0,
        latency_p95_ms=6.0,
        latency_p99_ms=9.0,
        rejection_p99_ms=None,
        lag_p99_ms=1.2,
        lag_max_ms=4.0,
    )


def write(rate: float, p50_ms: list[float], p99_ms: list[float], commits: int) -> WritePoint:
    runs = [
        WriteRun(Spread(1_000, a * MS, b * MS, 2 * b * MS), commits // len(p50_ms))
        for a, b in zip(p50_ms, p99_ms, strict=True)
    ]
    return WritePoint(rate, runs)


def e2e(rps: float, served: int, lag_p99_s: float) -> EndToEnd:
    return EndToEnd(
        offered_rps=rps,
        seconds=20.0,
        load=summary(int(rps * 20), served),
        behind_schedule=False,
        lag=Spread(served, 0.3, lag_p99_s, lag_p99_s + 0.1),
        stream_lag=Spread(served, 0.1, 0.25, 0.4),
        billable_rows=served - 2,
        refunded_rows=1,
        cores={GATEWAY: 0.8, WORKER: 0.2, CONSUMER: 0.1, NATS: 0.1, CLIENT: 0.15},
        gateway_cpu_s=served * 0.0012,
    )


def results(
    *,
    write_p99_ms: float = 2.0,
    drain_per_s: float = 8_000.0,
    lag_p99_s: float = 1.5,
    checker: object = "not run in this test",
) -> BillingResults:
    return BillingResults(
        floor=[Spread(1_000, 0.3 * MS, 4.0 * MS, 16 * MS)] * 5,
        writes=[
            write(1_000.0, [0.5, 0.6, 0.7, 0.8, 0.9], [write_p99_ms] * 5, 2_500),
            write(3_000.0, [0.6] * 5, [3.0] * 5, 3_000),
        ],
        cpu=[
            CpuPoint(NO_METERING, 1, 10_000, 0, [300.0, 250.0, 350.0]),
            CpuPoint(OUTBOX, 1, 5_000, 5_000, [600.0, 500.0, 700.0]),
            CpuPoint(NO_METERING, 32, 10_000, 0, [310.0, 260.0, 360.0]),
            CpuPoint(OUTBOX, 32, 10_000, 300, [330.0, 280.0, 380.0]),
        ],
        drains=[
            DrainPoint(RELAY, [DrainRun(50_000, 20.0, 4.0)]),
            DrainPoint(
                JETSTREAM_POSTGRES,
                [DrainRun(50_000, 50_000 / drain_per_s, 50_000 * 120e-6)] * 3,
            ),
            DrainPoint(OUTBOX_SQLITE, [DrainRun(50_000, 2.5, 2.0)] * 3),
        ],
        end_to_end=[e2e(1_000.0, 19_000, lag_p99_s), e2e(400.0, 8_000, 0.9)],
        checker=checker,
    )


# pure figures -------------------------------------------------------------------------


def test_spread_takes_nearest_rank_quantiles_and_the_largest():
    samples = [float(i) for i in range(1, 101)]  # 1 … 100
    assert spread(samples) == Spread(100, 50.0, 99.0, 100.0)


def test_spread_of_nothing_is_nan():
    empty = spread([])
    assert empty.count == 0 and math.isnan(empty.p50_s) and math.isnan(empty.p99_s)


def test_median_and_range_of_repeats():
    assert median_and_range([3.0, 1.0, 2.0, 10.0, 4.0]) == (3.0, 1.0, 10.0)


def test_a_write_point_sums_its_runs():
    point = write(1_000.0, [0.5, 0.9, 0.7], [2.0, 1.0, 3.0], 1_500)
    assert point.events == 3_000
    assert point.commits_per_event == pytest.approx(0.5)
    assert point.p50_s == pytest.approx((0.7 * MS, 0.5 * MS, 0.9 * MS))
    assert point.p99_s == pytest.approx((2.0 * MS, 1.0 * MS, 3.0 * MS))
    assert point.max_s == pytest.approx(6.0 * MS)


def test_commits_per_request_only_with_an_outbox():
    assert CpuPoint(OUTBOX, 32, 1_000, 50, [1.0]).commits_per_request == 0.05
    assert math.isnan(CpuPoint(NO_METERING, 32, 1_000, 0, [1.0]).commits_per_request)


def test_a_drain_run_gives_its_rate_and_cpu_per_event():
    run = DrainRun(10_000, 2.0, 0.5)
    assert run.per_s == 5_000.0
    assert run.cpu_us_per_event == pytest.approx(50.0)


def test_missing_counts_200s_without_a_billable_row():
    point = e2e(1_000.0, 19_000, 1.0)
    assert point.missing == 2


def test_the_bench_event_is_a_valid_usage_event():
    event = usage_event("r-1", 1_700_000_000.0)
    assert decode(encode(event)) == event


async def test_open_loop_calls_every_record_and_times_each():
    sink = NoSink()
    events = [usage_event(f"r-{i}", 1_700_000_000.0) for i in range(5)]
    recorded: list[UsageEvent] = []

    async def record(event: UsageEvent) -> None:
        recorded.append(event)

    sink.record = record  # type: ignore[method-assign]
    latencies = await record_open_loop(sink, events, [0.0, 0.0, 0.001, 0.002, 0.002])
    assert recorded == events
    assert len(latencies) == 5 and all(0 <= lat < 1 for lat in latencies)


# goals --------------------------------------------------------------------------------


def goal(rows: list[list[str]], what: str) -> list[str]:
    return next(row for row in rows if row[0].startswith(what))


def test_goals_met_say_so_without_a_reason():
    rows = billing_report.goal_rows(results())
    assert [row[3] for row in rows] == ["**met**"] * 4
    assert all(row[4] == "" for row in rows)
    assert goal(rows, "durable write p50")[2] == "0.70 ms (runs 0.50–0.90)"
    assert goal(rows, "consumer throughput")[2] == "8,000 events/s (runs 8,000–8,000)"
    assert goal(rows, "billing lag p99")[2] == "1.50 s over the 19,000 requests served (95.0%)"


def test_goals_missed_say_why_from_the_figures():
    rows = billing_report.goal_rows(results(write_p99_ms=5.0, drain_per_s=4_000.0, lag_p99_s=2.5))
    p99 = goal(rows, "durable write p99")
    assert p99[3] == "**missed**" and p99[4].startswith("the disk:") and "4.00 ms" in p99[4]
    drain = goal(rows, "consumer throughput")
    assert drain[3] == "**missed**" and "120 µs" in drain[4] and "0.48 of a core" in drain[4]
    lag = goal(rows, "billing lag p99")
    assert lag[3] == "**missed**" and "0.25 s of it at p99" in lag[4]
    assert "at most 2,500 events/s" in lag[4]


def test_a_lag_under_its_goal_is_missed_when_the_rate_was_not_carried():
    overloaded = replace(results(), end_to_end=[e2e(1_000.0, 12_000, 1.5)])
    lag = goal(billing_report.goal_rows(overloaded), "billing lag p99")
    assert lag[2] == "1.50 s over the 12,000 requests served (60.0%)"
    assert lag[3] == "**missed**" and lag[4].startswith("the gateway is CPU-bound")


def test_a_write_over_its_goal_on_a_fast_disk_blames_the_waiting():
    point = write(1_000.0, [1.5] * 3, [12.0] * 3, 1_500)
    reason = billing_report.write_reason("p99", point, 0.8 * MS, 3.0 * MS)
    assert reason.startswith("not the disk alone") and "0.80 ms at p99" in reason
    assert "0.50 commits per event" in reason


def test_a_lag_missed_under_overload_names_the_share_served():
    overloaded = e2e(1_000.0, 12_000, 3.0)
    relay = DrainPoint(RELAY, [DrainRun(50_000, 25.0, 4.0)])
    reason = billing_report.lag_reason(overloaded, relay)
    assert "CPU-bound (0.80 of a core, 1.20 ms of CPU per request served)" in reason
    assert "only 60.0% of the requests answered 200" in reason
    assert "0.25 s passed at p99 before JetStream stored an event" in reason


# tables and the section ---------------------------------------------------------------


def test_write_rows_start_with_the_disk_floor():
    rows = billing_report.write_rows(results())
    assert rows[0][0].startswith("one SQLite commit")
    assert rows[0][1:4] == ["5,000", "1.00", "0.30"]
    assert rows[1][:4] == ["`Outbox.record`, Poisson 1,000 events/s", "5,000", "0.50", "0.70"]
    assert rows[1][4:6] == ["0.50–0.90", "2.00"]


def test_cpu_rows_pair_the_sinks_and_subtract_the_medians():
    rows = billing_report.cpu_rows(results().cpu)
    assert rows[0] == [
        "1 at a time",
        "300",
        "250–350",
        "600",
        "500–700",
        "+300",
        "1.000",
        "15,000",
    ]
    assert rows[1][0] == "32 at once" and rows[1][5] == "+20" and rows[1][6] == "0.030"


def test_drain_rows_one_per_pair():
    rows = billing_report.drain_rows(results().drains)
    assert [row[0] for row in rows] == [RELAY, JETSTREAM_POSTGRES, OUTBOX_SQLITE]
    assert rows[1][1:5] == ["150,000", "8,000", "8,000–8,000", "120"]
    assert rows[2][2] == "20,000"


def test_e2e_rows_one_column_per_rate():
    rows = billing_report.e2e_rows(results().end_to_end)
    by_label = {row[0]: row[1:] for row in rows}
    assert by_label["answered 200"] == ["19,000 (95.0%)", "8,000 (100.0%)"]
    assert by_label["200s minus billable rows (below 0: served after the client gave up)"] == [
        "2",
        "2",
    ]
    assert by_label["**billing lag p50 / p99 / max (ms)**"] == [
        "300 / 1,500 / 1,600",
        "300 / 900 / 1,000",
    ]
    assert by_label[f"cores used: {GATEWAY}"] == ["0.80", "0.80"]
    assert by_label["gateway CPU per request served (ms)"] == ["1.20", "1.20"]


def test_the_section_names_its_command_and_every_part():
    section = billing_report.render(results(), MACHINE, COMMAND, 10.0)
    assert section.startswith("## Billing")
    assert f"Command: `{COMMAND}`" in section and MACHINE.date in section
    for heading in ("### Goals", "### 1.", "### 2.", "### 3.", "### 4.", "### 5."):
        assert heading in section
    assert "| 1,000 req/s | 400 req/s |" in section
    assert "Not run: not run in this test." in section


@dataclass(frozen=True)
class FakeCheckerReport:
    """The figures ``bench.checker.CheckerReport`` gives the section."""

    lost: int = 0
    double_billed: int = 0
    mode: str = "shared"
    seed: int = 7
    duration_s: float = 60.0
    events: int = 12_000
    answered_other: int = 15
    no_answer: int = 40
    kills_by_kind: Mapping[str, int] = field(
        default_factory=lambda: {"consumer": 5, "gateway": 2, "nats": 2}
    )
    unexpected_exits: Sequence[str] = ()
    duplicates_injected: int = 300
    duplicates_delivered: int = 300
    aggregate_problems: Sequence[str] = ()
    refunded_200: int = 0
    wrong_texts: int = 0
    billed_after_error: int = 0
    billed_without_200: int = 30
    settled: bool = True
    settle_s: float = 4.2

    @property
    def ok(self) -> bool:
        return not (self.lost or self.double_billed)


def checker_report(*, lost: int = 0, double_billed: int = 0) -> FakeCheckerReport:
    return FakeCheckerReport(lost=lost, double_billed=double_billed)


def test_the_checker_section_gives_its_figures():
    section = billing_report.render(results(checker=checker_report()), MACHINE, COMMAND, 10.0)
    assert "Not run" not in section
    assert "| requests answered 200 (the events to bill) | 12,000 |" in section
    assert "| kills: consumer / gateway / NATS | 5 / 2 / 2 |" in section
    assert "| duplicates injected / through the consumer | 300 / 300 |" in section
    assert "| **lost** (a 200 with no row) | **0** |" in section
    assert "| verdict | OK |" in section


def test_a_checker_that_finds_a_loss_fails_its_verdict():
    rows = dict(billing_report.checker_rows(checker_report(lost=2, double_billed=1)))
    assert rows["**lost** (a 200 with no row)"] == "**2**"
    assert rows["**double-billed**"] == "**1**"
    assert rows["verdict"] == "FAILED"


def test_a_checker_that_could_not_run_says_why():
    section = billing_report.render(
        results(checker="the checker could not start its system: no NATS"), MACHINE, COMMAND, 10.0
    )
    assert "Not run: the checker could not start its system: no NATS." in section
