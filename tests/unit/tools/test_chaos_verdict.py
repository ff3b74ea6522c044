"""The chaos run's verdicts (``bench/chaos_verdict.py``) and planted bugs (``plants.py``)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from headway import plants
from headway.background import Background
from headway.batches.model import LineResult
from headway.batches.planted import duplicating_first_answer
from headway.billing.sources.base import Delivery
from headway.billing.sources.planted import AckingOnFetch
from headway.metering.event import UsageEvent
from headway.metering.planted import DroppingMetering
from headway.metering.sink import MemorySink
from headway.settings import Settings
from headway_tools.bench import chaos_report
from headway_tools.bench.chaos import ChaosReport, ChaosSpec
from headway_tools.bench.chaos_verdict import (
    ChaosStep,
    LedgerRow,
    billing_verdict,
    chaos_plan,
    deadline_share,
    line_verdict,
    local_periods,
    quota_allowance,
    quota_verdict,
    seconds_outside,
    timeline,
)
from headway_tools.bench.host import Machine


def _row(request_id: str, texts: int = 1, billable: bool = True) -> LedgerRow:
    return LedgerRow(request_id, "t", billable, texts)


# Billing -------------------------------------------------------------------------------


def test_every_200_billed_once_is_ok() -> None:
    verdict = billing_verdict({"a": 2, "b": 1}, ["c"], [_row("a", 2), _row("b")], 2)
    assert verdict.ok
    assert (verdict.answered_200, verdict.billable_rows, verdict.billed_without_200) == (2, 2, 0)


def test_a_200_without_a_row_is_lost() -> None:
    verdict = billing_verdict({"a": 1, "b": 1}, [], [_row("a")], 1)
    assert verdict.lost == ("b",) and not verdict.ok


def test_a_row_twice_or_aggregated_twice_is_double_billed() -> None:
    twice = billing_verdict({"a": 1}, [], [_row("a"), _row("a")], 2)
    assert twice.double_billed == 1 + 0 and not twice.ok
    aggregated = billing_verdict({"a": 1}, [], [_row("a")], 2)
    assert aggregated.double_billed == 1 and not aggregated.ok


def test_wrong_texts_refunded_200s_and_billed_errors_are_caught() -> None:
    verdict = billing_verdict(
        {"a": 3, "b": 1}, ["e"], [_row("a", 2), _row("b", billable=False), _row("e")], 2
    )
    assert verdict.wrong_texts == ("a",)
    assert verdict.refunded_200 == ("b",)
    assert verdict.billed_after_error == ("e",)
    assert not verdict.ok


def test_a_billed_request_nobody_saw_answered_is_allowed_and_counted() -> None:
    verdict = billing_verdict({"a": 1}, [], [_row("a"), _row("z")], 2)
    assert verdict.ok and verdict.billed_without_200 == 1


# Batch lines ---------------------------------------------------------------------------


IDS = {"l1": "r1", "l2": "r2", "l3": "r3"}


def test_each_line_once_and_billed_is_ok() -> None:
    verdict = line_verdict(IDS, ["l1", "l3"], ["l2"], ["r1", "r3"])
    assert verdict.ok and (verdict.in_output, verdict.in_errors) == (2, 1)


def test_a_line_written_twice_is_duplicated() -> None:
    verdict = line_verdict(IDS, ["l1", "l1", "l2", "l3"], [], ["r1", "r2", "r3"])
    assert verdict.duplicated == ("l1",) and not verdict.ok
    across = line_verdict(IDS, ["l1", "l2", "l3"], ["l2"], ["r1", "r2", "r3"])
    assert across.duplicated == ("l2",)


def test_missing_unknown_unbilled_and_billed_error_lines_are_caught() -> None:
    verdict = line_verdict(IDS, ["l1", "l9"], ["l2"], ["r2"])
    assert verdict.missing == ("l3",)
    assert verdict.unknown == ("l9",)
    assert verdict.unbilled == ("l1",)
    assert verdict.billed_errors == ("l2",)
    assert not verdict.ok


# Quota ---------------------------------------------------------------------------------


def test_the_allowance_is_the_contract_plus_the_documented_extra() -> None:
    assert quota_allowance(100, 200, 10.0, 0, 0, 2) == (1200, 1200)
    # Two bursts per Redis outage, a local share (burst / N) per gateway started in one.
    assert quota_allowance(100, 200, 10.0, 2, 1, 2) == (1200, 1200 + 800 + 100)


def test_granted_beyond_the_allowance_is_over_admission() -> None:
    within = quota_verdict("t", 1200, 5, 100, 200, 10.0, 0, 0, 2)
    assert within.ok and within.granted_over_contract == 1.0
    over = quota_verdict("t", 1201, 5, 100, 200, 10.0, 0, 0, 2)
    assert not over.ok


# Deadline share ------------------------------------------------------------------------


def test_the_deadline_share_leaves_out_the_tenants_own_429s() -> None:
    outcomes: Sequence[tuple[int | None, float]] = [
        (200, 0.1),
        (200, 3.0),  # late
        (None, 5.0),  # no answer
        (503, 0.01),
        (429, 0.01),
    ]
    share = deadline_share("t", outcomes, 2.0)
    assert (share.sent, share.in_deadline, share.over_quota) == (5, 1, 1)
    assert share.share == pytest.approx(1 / 4)
    assert deadline_share("t", [], 2.0).share == 0.0


# The timeline --------------------------------------------------------------------------


def test_the_timeline_counts_each_window_beside_the_steps_begun_in_it() -> None:
    steps = [ChaosStep(3.0, "redis", "kill", 1.0), ChaosStep(25.0, "gw-a", "restart", 1.0)]
    sends: list[tuple[float, int | None, float]] = [
        (0.5, 200, 0.1),
        (4.0, None, 5.0),
        (9.9, 429, 0.0),
        (21.0, 200, 3.0),  # late
        (29.0, 200, 0.2),
    ]
    windows = timeline(sends, steps, 2.0)
    assert [w.start_s for w in windows] == [0.0, 10.0, 20.0]
    first, empty, last = windows
    assert (first.sent, first.in_deadline, first.over_quota, first.no_answer) == (3, 1, 1, 1)
    assert first.steps == ("kill redis",) and first.share == pytest.approx(0.5)
    assert (empty.sent, empty.steps, empty.share) == (0, (), 0.0)
    assert (last.sent, last.in_deadline, last.steps) == (2, 1, ("restart gw-a",))
    assert timeline([], steps, 2.0) == []


# The plan ------------------------------------------------------------------------------


def test_the_plan_is_seeded_spread_over_the_window_and_mixes_actions() -> None:
    targets = ("gw-a", "gw-b", "postgres", "redis", "nats", "consumer")
    plan = chaos_plan(3, 120.0, targets)
    assert plan == chaos_plan(3, 120.0, targets)
    assert plan != chaos_plan(4, 120.0, targets)
    assert all(0 < step.at_s < 120.0 for step in plan)
    assert [step.at_s for step in plan] == sorted(step.at_s for step in plan)
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(plan)]
    assert all(2.0 <= gap <= 5.0 for gap in gaps)
    assert {step.action for step in plan} == {"kill", "restart"}
    assert {step.target for step in plan} <= set(targets)
    for start in range(0, len(plan) - len(targets) + 1, len(targets)):  # rounds of all
        assert {step.target for step in plan[start : start + len(targets)]} == set(targets)
    assert all(0.2 <= step.down_s <= 2.0 for step in plan)
    with pytest.raises(ValueError, match="targets"):
        chaos_plan(3, 120.0, ())


# Plants --------------------------------------------------------------------------------


def test_a_plant_is_refused_without_the_test_flag() -> None:
    with pytest.raises(ValidationError, match="tests only"):
        Settings(test_faults={"drop_outbox_row"})
    rigged = Settings(test_faults={"ack_before_commit", "duplicate_line"}, test_faults_allowed=True)
    assert plants.planted(rigged, "ack_before_commit")
    assert plants.planted(rigged, "duplicate_line")
    assert not plants.planted(rigged, "drop_outbox_row")
    assert not plants.planted(Settings(), "ack_before_commit")


def _event(n: int) -> UsageEvent:
    return UsageEvent(
        request_id=f"r{n}",
        tenant_id=1,
        tenant="t",
        key_id="k",
        endpoint="embeddings",
        alias="a",
        version="v",
        tier="interactive",
        texts=1,
        tokens=1,
        outcome="ok",
        billable=True,
        queue_s=0.0,
        inference_s=0.0,
        total_s=0.0,
        gateway_id="g",
        at=0.0,
    )


def test_the_dropping_metering_drops_one_event_in_every() -> None:
    sink = MemorySink()
    dropping = DroppingMetering(sink, every=3)

    async def record() -> None:
        await dropping.start(Background())
        for n in range(1, 10):
            await dropping.record(_event(n))

    asyncio.run(record())
    assert [e.request_id for e in sink.events] == ["r1", "r2", "r4", "r5", "r7", "r8"]


class _Source:
    def __init__(self) -> None:
        self.log: list[str] = []

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        self.log.append("fetch")
        return [Delivery(b"x", "s", None, 1)]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.log.append("ack")

    async def pending(self) -> int | None:
        return 0

    async def close(self) -> None:
        return None


def test_the_early_acker_acks_at_fetch_and_never_after() -> None:
    source = _Source()
    early = AckingOnFetch(source)

    async def one_step() -> None:
        deliveries = await early.fetch(10, 0.1)
        source.log.append("commit")
        await early.ack(deliveries)

    asyncio.run(one_step())
    assert source.log == ["fetch", "ack", "commit"]


def test_the_duplicator_writes_the_first_answer_twice() -> None:
    results = [LineResult(1, False, b"e"), LineResult(2, True, b"a"), LineResult(3, True, b"b")]
    lines = [r.line for r in duplicating_first_answer(results)]
    assert lines == [1, 2, 2, 3]


def test_no_deployment_file_sets_a_plant() -> None:
    root = Path(__file__).parents[3]
    files = [root / "compose.yaml", root / "Dockerfile", *sorted((root / "deploy").rglob("*"))]
    rigged = [
        str(path.relative_to(root))
        for path in files
        if path.is_file() and "TEST_FAULT" in path.read_text(errors="replace").upper()
    ]
    assert rigged == []


# The section ---------------------------------------------------------------------------


def _report(lost: tuple[str, ...] = ()) -> ChaosReport:
    spec = ChaosSpec(chaos_s=30.0, lines=3, seed=3)
    billing = billing_verdict(
        {"a": 2, **{f"l{n}": 1 for n in range(3)}},
        [],
        [_row(i) for i in ("l0", "l1", "l2") if i not in lost] + [_row("a", 2)],
        4,
    )
    return ChaosReport(
        spec=spec,
        plan=tuple(spec.steps()),
        steps_done={"kill postgres": 1, "restart gw-a": 2},
        unexpected_exits=("executor-0 (life 2) exited at start, status 3: startup failed",),
        settled=True,
        settle_s=1.5,
        load_s=32.0,
        batch_status="completed",
        batch_s=20.0,
        billing=billing,
        lines=line_verdict(
            {"c0": "l0", "c1": "l1", "c2": "l2"}, ["c0", "c1", "c2"], [], ["l0", "l1", "l2"]
        ),
        quota=quota_verdict("chaos-a", 500, 12, 20, 40, 30.0, 1, 0, 2),
        deadlines=(deadline_share("chaos-a", [(200, 0.1), (429, 0.0)], 2.0),),
        timeline=tuple(timeline([(1.0, 200, 0.1), (12.0, None, 5.0)], spec.steps(), 2.0)),
        statuses={0: 3, 200: 1, 429: 1},
        no_answer={"timed out": 2, "no gateway reachable": 1},
        aggregate_problems=(),
        outbox_left=(("kill", "gw-a", 3), ("restart", "gw-b", 0)),
    )


def test_the_section_shows_the_verdict_the_checks_and_the_plan_to_replay() -> None:
    machine = Machine("2026-01-01 00:00 UTC", 2, "AMD EPYC", "Linux", "3.11.7", 0.5)
    section = chaos_report.render(_report(), machine, "headway bench chaos")
    assert section.startswith("## Chaos:")
    assert "Verdict: **held**" in section
    assert "| quota over-admission (chaos-a) |" in section
    assert "| chaos-a | 2 | 1 | 1 | 100.0% |" in section
    assert "executor-0 (life 2) exited at start" in section
    assert "kill gw-a: 3; restart gw-b: 0" in section
    assert "(no answer: no gateway reachable 1, timed out 2)" in section
    assert "| 10–20 |" in section
    assert "--seed 3" in section
    assert all(step.describe() in section for step in _report().plan)
    failed = chaos_report.render(_report(lost=("l1",)), machine, "headway bench chaos")
    assert "Verdict: **did not hold**: lost 200s: 1" in failed
    assert "| every 200 billed (lost) | 4 200s (lines included) | **1** |" in failed


def test_seconds_a_gateway_limits_locally_while_redis_answers_widen_the_allowance() -> None:
    assert quota_allowance(100, 200, 10.0, 1, 0, 2, local_while_up_s=1.5) == (
        1200,
        1200 + 400 + 75,
    )


GATEWAY_LOG = """\
2026-12-04 14:40:50,000 INFO headway.access[11]: POST /v1/embeddings 200
2026-12-04 14:40:56,000 WARNING quota[11]: quota store unavailable (x); limiting locally
2026-12-04 14:40:57,500 INFO quota[11]: quota store is back; limiting through Redis
2026-12-04 14:40:58,000 WARNING quota[11]: quota store unavailable (closed); limiting locally
2026-12-04 14:40:58,250 INFO headway.access[11]: POST /v1/embeddings 200
2026-12-04 14:41:00,000 INFO headway.serve[12]: gateway on 127.0.0.1:9000
2026-12-04 14:41:05,000 WARNING quota[12]: quota store unavailable (y); limiting locally
"""


def test_local_periods_end_where_the_gateway_leaves_local_mode_dies_or_the_run_ends() -> None:
    def at(clock: str) -> float:
        return datetime.strptime(f"2026-12-04 14:{clock}", "%Y-%m-%d %H:%M:%S").timestamp()

    periods = local_periods(GATEWAY_LOG, end=at("41:06"))
    assert periods == [
        (at("40:56"), at("40:57") + 0.5),  # left local mode
        (at("40:58"), at("41:00")),  # killed while local: its next life's first line
        (at("41:05"), at("41:06")),  # still local at the end
    ]
    # Redis away 56.0-57.0: of the 4.5 s local, 3.5 s were while Redis answered.
    assert seconds_outside(periods, [(at("40:56"), at("40:57"))]) == pytest.approx(3.5)
