from dataclasses import replace

import pytest

from headway.registry.errors import InvalidRollout
from headway.registry.model import SHADOW_STEP, Rollout, RolloutPlan, Shadow, Split
from headway.rollouts.analysis import PASS, Verdict, judge, next_move
from headway.rollouts.stats import VersionCounts
from headway.rollouts.steps import split_for

PLAN = RolloutPlan(
    steps=(SHADOW_STEP, 5, 50, 100),
    max_error_rate=0.01,
    max_latency_ratio=1.5,
    min_agreement=0.95,
    min_requests=20,
)
NONE = VersionCounts()


def counts(requests=0, errors=0, latency_s=0.05, agreement_n=0, agreement_sum=0.0):
    out = VersionCounts(agreement_n=agreement_n, agreement_sum=agreement_sum)
    for index in range(requests):
        out.record(latency_s, failed=index < errors)
    return out


def shadow(**kwargs):
    return judge(PLAN, SHADOW_STEP, NONE, counts(requests=100), counts(**kwargs))


# shadow steps ------------------------------------------------------------------------


def test_shadow_halts_on_too_few_comparisons():
    verdict = shadow(requests=100, agreement_n=19, agreement_sum=19.0)
    assert verdict == Verdict(
        "halt", "candidate saw 19 shadow comparisons, fewer than the 20 needed to judge"
    )
    assert shadow(requests=100, agreement_n=20, agreement_sum=20.0) == PASS


def test_shadow_fails_on_its_error_rate():
    assert shadow(requests=1000, errors=10, agreement_n=990, agreement_sum=990.0) == PASS
    verdict = shadow(requests=1000, errors=11, agreement_n=989, agreement_sum=989.0)
    assert verdict.outcome == "fail"
    assert "1.10% (11 of 1000)" in verdict.reason
    assert "1.00% allowed" in verdict.reason


def test_a_shadow_that_always_fails_is_rolled_back_not_halted():
    assert shadow(requests=100, errors=100).outcome == "fail"
    # Too few copies to judge their errors: too few to judge at all.
    assert shadow(requests=19, errors=19).outcome == "halt"


def test_shadow_fails_on_low_agreement():
    assert shadow(requests=20, agreement_n=20, agreement_sum=0.95 * 20) == PASS
    verdict = shadow(requests=20, agreement_n=20, agreement_sum=0.949 * 20)
    assert verdict.outcome == "fail"
    assert "0.9490 on average over 20 comparisons, below the 0.95 required" in verdict.reason


def test_shadow_latency_is_not_judged():
    slow = counts(requests=100, latency_s=30.0, agreement_n=100, agreement_sum=100.0)
    assert judge(PLAN, SHADOW_STEP, NONE, counts(requests=100, latency_s=0.01), slow) == PASS


# weighted steps ----------------------------------------------------------------------


def test_weighted_step_halts_on_too_few_candidate_requests():
    verdict = judge(PLAN, 5, counts(requests=19), counts(requests=500), NONE)
    assert verdict == Verdict(
        "halt", "candidate served 19 requests at 5%, fewer than the 20 needed to judge"
    )
    assert judge(PLAN, 5, counts(requests=20), counts(requests=500), NONE) == PASS


def test_weighted_step_fails_on_the_candidates_error_rate():
    primary = counts(requests=1000)
    assert judge(PLAN, 50, counts(requests=1000, errors=10), primary, NONE) == PASS
    verdict = judge(PLAN, 50, counts(requests=1000, errors=11), primary, NONE)
    assert verdict.outcome == "fail"
    assert "1.10% of its requests (11 of 1000) at 50%" in verdict.reason


def test_weighted_step_fails_on_the_latency_ratio():
    primary = counts(requests=100, latency_s=0.1)
    candidate = counts(requests=100, latency_s=0.2)
    ratio = candidate.p95() / primary.p95()
    assert ratio > 1.2  # the two latencies sit in different buckets
    assert judge(_plan(max_latency_ratio=ratio * 1.001), 5, candidate, primary, NONE) == PASS
    verdict = judge(_plan(max_latency_ratio=ratio * 0.999), 5, candidate, primary, NONE)
    assert verdict.outcome == "fail"
    assert f"is {ratio:.2f}× the primary's" in verdict.reason
    assert f"{candidate.p95() * 1000:.1f} ms" in verdict.reason


def test_latency_is_judged_only_when_the_primary_served_enough():
    candidate = counts(requests=100, latency_s=5.0)
    assert judge(PLAN, 5, candidate, counts(requests=19, latency_s=0.01), NONE) == PASS
    assert judge(PLAN, 5, candidate, counts(requests=20, latency_s=0.01), NONE).outcome == "fail"


def test_at_100_percent_only_errors_are_judged():
    slow = counts(requests=100, latency_s=5.0)
    assert judge(PLAN, 100, slow, counts(requests=100, latency_s=0.01), NONE) == PASS
    failing = counts(requests=100, errors=2, latency_s=5.0)
    assert judge(PLAN, 100, failing, NONE, NONE).outcome == "fail"


def _plan(**changes):
    return replace(PLAN, **changes)


# next_move ---------------------------------------------------------------------------

PINS = (("acme", "v-old"),)


def rollout(step, *, state="running", plan=PLAN):
    return Rollout(
        id=3,
        alias="minilm",
        primary="v-old",
        candidate="v-new",
        plan=plan,
        state=state,
        step=step,
        step_started_at=500.0,
        reason="",
        started_by="cli:ana",
        created_at=400.0,
        updated_at=500.0,
    )


def current(step, plan=PLAN, pins=()):
    previous = Split("minilm", (("v-old", 1.0),), pins=pins)
    return split_for("minilm", "v-old", "v-new", plan.steps[step], plan, previous)


def test_pass_advances_to_the_next_steps_split():
    move = next_move(rollout(0), PASS, 900.0, split=current(0, pins=PINS))
    assert (move.state, move.step, move.step_started_at) == ("running", 1, 900.0)
    assert move.action == "rollout.advance"
    assert move.split == Split("minilm", (("v-old", 95.0), ("v-new", 5.0)), pins=PINS)
    assert move.alias_version is None
    assert move.reason == "the shadow step passed"


def test_pass_on_the_last_step_promotes():
    move = next_move(rollout(3), PASS, 900.0, split=current(3))
    assert (move.state, move.action, move.alias_version) == (
        "succeeded",
        "rollout.promote",
        "v-new",
    )
    assert move.split is None
    pinned = next_move(rollout(3), PASS, 900.0, split=current(3, pins=PINS))
    assert pinned.split == Split("minilm", (("v-new", 1.0),), pins=PINS)


def test_pass_before_100_waits_for_approval_when_the_plan_asks():
    plan = _plan(approval=True)
    split = current(2, plan)
    move = next_move(rollout(2, plan=plan), PASS, 900.0, split=split)
    assert (move.state, move.step) == ("awaiting_approval", 2)
    assert move.action == "rollout.await_approval"
    assert move.split == split
    assert move.step_started_at == 500.0
    earlier = next_move(rollout(1, plan=plan), PASS, 900.0, split=current(1, plan))
    assert earlier.action == "rollout.advance"


def test_fail_rolls_back_to_the_primary():
    verdict = Verdict("fail", "candidate failed 2.00% of its requests")
    move = next_move(rollout(2), verdict, 900.0, split=current(2))
    assert (move.state, move.action, move.reason) == (
        "rolled_back",
        "rollout.rollback",
        verdict.reason,
    )
    assert move.split is None and move.alias_version is None
    pinned = next_move(rollout(2), verdict, 900.0, split=current(2, pins=PINS))
    assert pinned.split == Split("minilm", (("v-old", 1.0),), pins=PINS)


def test_halt_keeps_traffic_as_it_is():
    split = current(1)
    verdict = Verdict("halt", "candidate served 3 requests at 5%, fewer than the 20 needed")
    move = next_move(rollout(1), verdict, 900.0, split=split)
    assert (move.state, move.step, move.split, move.action) == (
        "halted",
        1,
        split,
        "rollout.halt",
    )
    assert move.reason == verdict.reason


def test_only_a_running_rollout_is_judged():
    with pytest.raises(InvalidRollout, match="paused"):
        next_move(rollout(1, state="paused"), PASS, 900.0, split=current(1))


# steps -------------------------------------------------------------------------------


def test_each_steps_split_keeps_pins_and_stickiness():
    previous = Split("minilm", (("v-old", 1.0),), sticky="user", pins=PINS)
    plan = _plan(shadow_share=0.25)
    assert split_for("minilm", "v-old", "v-new", SHADOW_STEP, plan, previous) == Split(
        "minilm", (("v-old", 1.0),), sticky="user", pins=PINS, shadow=Shadow("v-new", 0.25)
    )
    assert split_for("minilm", "v-old", "v-new", 25, plan, previous).weights == (
        ("v-old", 75.0),
        ("v-new", 25.0),
    )
    # No split before: each request drawn, so a small canary sees its share of requests.
    assert split_for("minilm", "v-old", "v-new", 100, plan, None) == Split(
        "minilm", (("v-new", 1.0),), sticky="none"
    )
    with pytest.raises(InvalidRollout, match="101"):
        split_for("minilm", "v-old", "v-new", 101, plan, None)
