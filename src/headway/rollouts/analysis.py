"""Judging one step of a rollout on its counts, and choosing the move that follows.

``judge`` reads every gateway's counts for the step's interval, summed (``stats.merged``),
and answers pass, fail or halt. Too little traffic halts, never passes: a check that passes
on an empty interval promotes a candidate nobody called. A shadow step fails on the shadow
copies' error rate, or on mean agreement with the primary's answers below
``min_agreement``; its latency is not judged, since shadow copies run below the batch tier
and their p95 says how busy the pool was, not how fast the candidate is. A weighted step
fails on the candidate's error rate, or on its p95 over the primary's above
``max_latency_ratio`` when both served enough requests to tell (at 100%, with no primary
traffic left, on errors only). Error rates are judged once there are ``min_requests``
requests, before the count of comparisons, so a candidate whose every shadow copy fails is
rolled back rather than halted for want of answers to compare.

``next_move`` turns a verdict into the ``Move`` the store makes: pass advances (or waits for
approval before 100%, or promotes after the last step), fail rolls back to the primary, halt
keeps traffic as it is and waits for an operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from headway.registry.errors import InvalidRollout
from headway.registry.model import SHADOW_STEP, Rollout, RolloutPlan, Split
from headway.rollouts.move import Move
from headway.rollouts.stats import VersionCounts
from headway.rollouts.steps import promoted_split, rollback_split, split_for, step_label

Outcome = Literal["pass", "fail", "halt"]


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reason: str = ""
    """For fail and halt: what was measured, as a sentence."""


PASS = Verdict("pass")


def judge(
    plan: RolloutPlan,
    step_percent: int,
    candidate: VersionCounts,
    primary: VersionCounts,
    shadow: VersionCounts,
) -> Verdict:
    if step_percent == SHADOW_STEP:
        return _judge_shadow(plan, shadow)
    return _judge_weighted(plan, step_percent, candidate, primary)


def _judge_shadow(plan: RolloutPlan, shadow: VersionCounts) -> Verdict:
    if shadow.requests >= plan.min_requests and shadow.error_rate > plan.max_error_rate:
        return Verdict(
            "fail",
            f"shadow copies to the candidate failed at {shadow.error_rate:.2%} "
            f"({shadow.errors} of {shadow.requests}), above the "
            f"{plan.max_error_rate:.2%} allowed",
        )
    mean = shadow.mean_agreement
    if mean is None or shadow.agreement_n < plan.min_requests:
        return Verdict(
            "halt",
            f"candidate saw {shadow.agreement_n} shadow comparisons, fewer than the "
            f"{plan.min_requests} needed to judge",
        )
    if mean < plan.min_agreement:
        return Verdict(
            "fail",
            f"candidate's answers agreed with the primary's {mean:.4f} on average over "
            f"{shadow.agreement_n} comparisons, below the {plan.min_agreement:g} required",
        )
    return PASS


def _judge_weighted(
    plan: RolloutPlan, percent: int, candidate: VersionCounts, primary: VersionCounts
) -> Verdict:
    if candidate.requests < plan.min_requests:
        return Verdict(
            "halt",
            f"candidate served {candidate.requests} requests at {percent}%, fewer than "
            f"the {plan.min_requests} needed to judge",
        )
    if candidate.error_rate > plan.max_error_rate:
        return Verdict(
            "fail",
            f"candidate failed {candidate.error_rate:.2%} of its requests "
            f"({candidate.errors} of {candidate.requests}) at {percent}%, above the "
            f"{plan.max_error_rate:.2%} allowed",
        )
    if percent < 100 and primary.requests >= plan.min_requests:
        candidate_p95, primary_p95 = candidate.p95(), primary.p95()
        if (
            candidate_p95 is not None
            and primary_p95 is not None
            and candidate_p95 > plan.max_latency_ratio * primary_p95
        ):
            ratio = candidate_p95 / primary_p95 if primary_p95 > 0 else float("inf")
            return Verdict(
                "fail",
                f"candidate p95 {candidate_p95 * 1000:.1f} ms is {ratio:.2f}× the "
                f"primary's {primary_p95 * 1000:.1f} ms at {percent}%, above the "
                f"{plan.max_latency_ratio:g}× allowed",
            )
    return PASS


def promotes(rollout: Rollout, move: Move) -> bool:
    """Whether ``move`` gives the candidate the alias, or all of its traffic."""
    return move.state == "succeeded" or (
        move.state == "running" and rollout.plan.steps[move.step] == 100
    )


def next_move(rollout: Rollout, verdict: Verdict, now: float, *, split: Split | None) -> Move:
    """The move after a running rollout's step was judged; ``split`` is the alias's
    split now, whose pins and stickiness every later split keeps."""
    if rollout.state != "running":
        raise InvalidRollout(
            f"rollout {rollout.id} is {rollout.state}; only a running one is judged"
        )
    steps = rollout.plan.steps
    label = step_label(steps[rollout.step])
    if verdict.outcome == "fail":
        return Move(
            "rolled_back",
            rollout.step,
            rollout.step_started_at,
            verdict.reason,
            rollback_split(rollout.alias, rollout.primary, split),
            "rollout.rollback",
        )
    if verdict.outcome == "halt":
        return Move(
            "halted", rollout.step, rollout.step_started_at, verdict.reason, split, "rollout.halt"
        )
    if rollout.step == len(steps) - 1:
        return Move(
            "succeeded",
            rollout.step,
            rollout.step_started_at,
            f"promoted after the {label} step passed",
            promoted_split(rollout.alias, rollout.candidate, split),
            "rollout.promote",
            alias_version=rollout.candidate,
        )
    following = steps[rollout.step + 1]
    plan = rollout.plan
    if following == 100 and plan.approval:
        return Move(
            "awaiting_approval",
            rollout.step,
            rollout.step_started_at,
            f"the {label} step passed; 100% waits for a second person's approval",
            split,
            "rollout.await_approval",
        )
    return Move(
        "running",
        rollout.step + 1,
        now,
        f"the {label} step passed",
        split_for(rollout.alias, rollout.primary, rollout.candidate, following, plan, split),
        "rollout.advance",
    )
