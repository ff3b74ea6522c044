"""The pure rules a rollout plan must keep (splits: ``test_contract``, through the
registry)."""

from __future__ import annotations

import math

import pytest

from headway.registry.errors import InvalidOverlap, InvalidRollout
from headway.registry.model import RolloutPlan
from headway.registry.rules import check_plan, overlap_value

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (RolloutPlan(steps=()), "end at 100"),
        (RolloutPlan(steps=(0, 50)), "end at 100"),
        (RolloutPlan(steps=(0, 150, 100)), "0..100"),
        (RolloutPlan(steps=(-5, 100)), "0..100"),
        (RolloutPlan(steps=(5, 0, 100)), "only a plan's first step"),
        (RolloutPlan(steps=(0, 50, 50, 100)), "strictly increase"),
        (RolloutPlan(steps=(0, 60, 40, 100)), "strictly increase"),
        (RolloutPlan(interval_s=0), "interval_s"),
        (RolloutPlan(interval_s=math.inf), "interval_s"),
        (RolloutPlan(max_error_rate=1.5), "max_error_rate"),
        (RolloutPlan(max_error_rate=math.nan), "max_error_rate"),
        (RolloutPlan(max_latency_ratio=0), "max_latency_ratio"),
        (RolloutPlan(min_agreement=2), "min_agreement"),
        (RolloutPlan(min_requests=-1), "min_requests"),
        (RolloutPlan(shadow_share=0), "shadow_share"),
    ],
)
def test_a_plan_that_breaks_a_rule_is_refused(plan: RolloutPlan, message: str) -> None:
    with pytest.raises(InvalidRollout, match=message):
        check_plan(plan)


@pytest.mark.parametrize(
    "plan", [RolloutPlan(), RolloutPlan(steps=(100,)), RolloutPlan(steps=(1, 2, 100))]
)
def test_a_plan_that_keeps_the_rules_passes(plan: RolloutPlan) -> None:
    assert check_plan(plan) == plan


@pytest.mark.parametrize("overlap_s", [-1.0, math.nan, math.inf])
def test_a_rotation_overlap_is_zero_or_more_finite_seconds(overlap_s: float) -> None:
    with pytest.raises(InvalidOverlap):
        overlap_value(overlap_s)
    assert overlap_value(0) == 0.0
