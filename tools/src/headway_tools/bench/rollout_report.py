"""``headway bench rollout``'s Markdown section, with each goal and whether it was met."""

from __future__ import annotations

from headway_tools.bench.host import Machine
from headway_tools.bench.rollout import (
    CANARY_RPS,
    CANARY_STEPS,
    FAIL_SHARE,
    FLIPS,
    GATEWAYS,
    SHADOW_TEXTS,
    RolloutResults,
    ShadowPoint,
)
from headway_tools.bench.stats import markdown_table

SECTION = "rollout"
SHADOW_GOAL = 0.05
PROPAGATION_GOAL_S = 2.0


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _change(base: float | None, other: float | None) -> float | None:
    if base is None or other is None or base == 0:
        return None
    return (other - base) / base


def render(results: RolloutResults, machine: Machine, command: str) -> str:
    canary = results.canary
    rollback_ok = canary.seconds_to_rollback <= 2 * canary.interval_s
    errors_ok = canary.errors <= canary.allowed_errors
    base, shadowed, capacity = _points(results.shadow)
    p95_change = _change(base.summary.latency_p95_ms, shadowed.summary.latency_p95_ms)
    goodput_change = _change(
        base.summary.goodput / base.summary.seconds,
        shadowed.summary.goodput / shadowed.summary.seconds,
    )
    shadow_ok = (
        p95_change is not None
        and goodput_change is not None
        and p95_change <= SHADOW_GOAL
        and goodput_change >= -SHADOW_GOAL
    )
    sent_at_capacity = capacity.shadow.get("compared", 0) + capacity.shadow.get("failed", 0)
    return "\n\n".join(
        [
            "## Rollouts: a bad canary, the cost of shadow traffic, a split reaching every gateway",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; 1-minute load average "
            f"{machine.load_average:.2f} at start; the load generator, Postgres and every "
            "process on the same machine.",
            f"**Bad canary.** Two synthetic replicas, the candidate's failing {FAIL_SHARE:.0%} "
            f"of its model calls; open-loop Poisson load of {CANARY_RPS:g} requests/s (2 texts) "
            f"on the alias; rollout steps {', '.join(f'{s}%' for s in CANARY_STEPS)}, analysis "
            f"interval {canary.interval_s:g} s, registry on Postgres. Errors allowed: the "
            f"canary's {CANARY_STEPS[0]}% of the requests sent until the rollback.",
            markdown_table(
                ["start → rollback", "goal ≤ 2 intervals", "client errors", "allowed", "goal"],
                [
                    [
                        f"{canary.seconds_to_rollback:.2f} s",
                        _met(rollback_ok),
                        f"{canary.errors}",
                        f"{canary.allowed_errors:.1f}",
                        _met(errors_ok),
                    ]
                ],
                "rlrrl",
            ),
            f"Reason recorded: “{canary.reason}”",
            f"**Shadow traffic.** The real model: fp32 (primary) and its int8 variant (shadow) "
            f"on one worker, requests of {SHADOW_TEXTS} texts, open-loop Poisson, "
            f"{results.seconds:g} s a point. Goal: the primary's p95 and goodput at most "
            f"{SHADOW_GOAL:.0%} worse with every request shadowed; no shadow work at capacity.",
            markdown_table(
                [
                    "run",
                    "requests/s",
                    "p95 ms",
                    "goodput/s",
                    "shadow compared",
                    "skipped",
                    "failed",
                ],
                [_shadow_row(point) for point in results.shadow],
                "lrrrrrr",
            ),
            f"With every request shadowed the primary's p95 changed by {_percent(p95_change)} "
            f"and its goodput by {_percent(goodput_change)}: {_met(shadow_ok)}. At capacity "
            f"({capacity.rate_rps:g} requests/s) "
            f"{sent_at_capacity:.0f} shadow copies ran: {_met(sent_at_capacity == 0)}.",
            f"**Split propagation.** `headway up --gateways {GATEWAYS}`, two synthetic "
            f"versions; {FLIPS} flips of the alias's split on the first gateway's admin API, "
            "each timed from the write until both other gateways answer with the new version "
            f"(each gateway reads the registry's change counter every 0.5 s, the default). "
            f"Goal ≤ "
            f"{PROPAGATION_GOAL_S:g} s.",
            markdown_table(
                ["registry", "median", "max", "goal"],
                [
                    [
                        p.registry,
                        f"{p.median_s:.2f} s",
                        f"{p.max_s:.2f} s",
                        _met(p.max_s <= PROPAGATION_GOAL_S),
                    ]
                    for p in results.propagation
                ],
                "lrrl",
            ),
        ]
    )


def _points(points: tuple[ShadowPoint, ...]) -> tuple[ShadowPoint, ShadowPoint, ShadowPoint]:
    by_name = {point.name: point for point in points}
    return (
        by_name["no shadow"],
        by_name["every request shadowed"],
        by_name["shadowed, at capacity"],
    )


def _shadow_row(point: ShadowPoint) -> list[str]:
    summary = point.summary
    return [
        point.name,
        f"{point.rate_rps:g}",
        _ms(summary.latency_p95_ms),
        f"{summary.goodput / summary.seconds:.1f}",
        f"{point.shadow.get('compared', 0):.0f}",
        f"{point.shadow.get('skipped', 0):.0f}",
        f"{point.shadow.get('failed', 0):.0f}",
    ]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"
