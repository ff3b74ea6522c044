"""A request answered 200 is billed once, through SIGKILLs of the consumer, a gateway
and NATS and through injected duplicates (``headway_tools.bench.checker``), in both modes.

Each test also proves the chaos happened: a checker that passes because nothing was
killed, nothing was duplicated or nothing was served fails here.
"""

from __future__ import annotations

from pathlib import Path

from headway_tools.bench.checker import (
    CHAOS_SPAN,
    CHAOS_START,
    CheckerReport,
    CheckerSpec,
    chaos_plan,
    run_checker,
)

MIN_EVENTS = 500  # 200s a short run must reach on a 2-core machine (it makes thousands)


def assert_billed_once_through_chaos(report: CheckerReport, spec: CheckerSpec) -> None:
    why = report.describe()
    assert report.settled, why
    assert report.lost == 0, why
    assert report.double_billed == 0, why
    assert report.aggregate_problems == [], why
    assert report.refunded_200 == 0, why
    assert report.wrong_texts == 0, why
    assert report.billed_after_error == 0, why
    assert report.unexpected_exits == [], why
    assert report.ok, why
    # The chaos really happened ...
    assert report.kills_by_kind.get("consumer", 0) >= spec.consumer_kills, why
    assert report.kills_by_kind.get("gateway", 0) >= spec.gateway_kills, why
    assert report.kills_by_kind.get("nats", 0) >= spec.nats_faults, why
    assert report.no_answer > 0, why  # a gateway died under load
    # ... on real traffic, every 200 of which is in the ledger ...
    assert report.events_answered_200 >= MIN_EVENTS, why
    assert report.billable >= report.events_answered_200, why
    # ... and the copies reached the consumer, which dropped them.
    assert report.duplicates_injected > 0, why
    assert report.duplicates_delivered == report.duplicates_injected, why
    assert report.duplicates_seen > 0, why


def test_shared_mode_bills_each_200_once(tmp_path: Path) -> None:
    spec = CheckerSpec(
        mode="shared",
        duration_s=15.0,
        consumer_kills=3,
        gateway_kills=1,
        nats_kills=1,
        duplicates_share=0.05,
        seed=1,
    )
    report = run_checker(spec, tmp_path)
    assert_billed_once_through_chaos(report, spec)
    # Every event once in the stream, plus the copies (which the ledger dropped).
    assert report.stream_messages is not None
    assert report.stream_messages >= report.billed + report.duplicates_injected, report.describe()


def test_embedded_mode_bills_each_200_once(tmp_path: Path) -> None:
    spec = CheckerSpec(
        mode="embedded",
        duration_s=15.0,
        consumer_kills=3,
        gateway_kills=1,
        duplicates_share=0.05,
        seed=2,
    )
    report = run_checker(spec, tmp_path)
    assert_billed_once_through_chaos(report, spec)


def test_the_chaos_plan_is_seeded_and_spread_over_the_run() -> None:
    spec = CheckerSpec(duration_s=60.0, consumer_kills=5, gateway_kills=2, nats_kills=2, seed=7)
    plan = chaos_plan(spec)
    assert plan == chaos_plan(spec)
    assert plan != chaos_plan(CheckerSpec(duration_s=60.0, consumer_kills=5, seed=8))
    kinds = [fault.kind for fault in plan]
    assert (kinds.count("consumer"), kinds.count("gateway"), kinds.count("nats")) == (5, 2, 2)
    low, high = 60.0 * CHAOS_START, 60.0 * (CHAOS_START + CHAOS_SPAN)
    assert all(low <= fault.at_s <= high for fault in plan)
    consumer = [fault for fault in plan if fault.kind == "consumer"]
    slot = 60.0 * CHAOS_SPAN / 5
    assert all(low + i * slot <= f.at_s <= low + (i + 1) * slot for i, f in enumerate(consumer))
    assert [fault.frozen_s > 0 for fault in consumer] == [False, True, False, True, False]
    assert all(fault.frozen_s == 0 for fault in plan if fault.kind != "consumer")
    assert {fault.target for fault in plan if fault.kind == "gateway"} <= {"gw-a", "gw-b"}
