"""The overload scenarios as a Markdown section, with the goals beside the figures."""

from __future__ import annotations

from collections.abc import Sequence

from headway_tools.bench.host import Machine
from headway_tools.bench.overload import (
    BATCH_DEADLINE_MS,
    DEADLINE_MS,
    GATEWAYS_SCENARIO,
    LATENCY_BUDGET_MS,
    TEXTS,
    OverloadResults,
    Point,
)
from headway_tools.bench.stats import fmt_latency, markdown_table
from headway_tools.loadgen import Summary

SECTION = "overload"
ROLES = ("gateway", "worker", "client")  # as ``overload.cpu_by_role`` names them


def _pct(part: float, whole: float) -> str:
    return "n/a" if whole <= 0 else f"{100 * part / whole:.1f}%"


def _on(point: Point) -> str:
    return "on" if point.admission else "off"


def _overload_rows(points: Sequence[Point]) -> list[list[str]]:
    rows = []
    for p in points:
        s = p.overall
        rows.append(
            [
                p.scenario,
                f"{p.offered_x:g}×",
                _on(p),
                f"{s.offered_rps:,.0f}",
                f"{s.served_rps:,.1f}",
                f"{s.goodput_rps:,.1f}",
                _pct(s.goodput_rps, p.capacity_rps),
                _pct(s.shed, s.offered),
                str(s.timeouts),
                str(s.errors),
                fmt_latency(s.latency_p50_ms),
                fmt_latency(s.latency_p95_ms),
                fmt_latency(s.latency_p99_ms),
                fmt_latency(s.rejection_p99_ms),
                "yes" if p.result.report.behind_schedule else "no",
            ]
        )
    return rows


def _gateways_rows(points: Sequence[Point]) -> list[list[str]]:
    rows = []
    for p in points:
        s = p.overall
        cores = p.cpu_cores or {}
        rows.append(
            [
                str(p.gateways),
                f"{p.offered_x:g}×",
                f"{s.offered_rps:,.0f}",
                f"{s.goodput_rps:,.1f}",
                _pct(s.goodput_rps, p.capacity_rps),
                _pct(s.shed, s.offered),
                str(s.timeouts),
                str(s.errors),
                fmt_latency(s.latency_p50_ms),
                fmt_latency(s.latency_p95_ms),
                "n/a" if s.latency_p95_ms is None else _pct(s.latency_p95_ms, LATENCY_BUDGET_MS),
                " / ".join(
                    f"{cores.get(role, 0.0):.2f}" for role in ("gateway", "worker", "client")
                ),
                "yes" if p.result.report.behind_schedule else "no",
            ]
        )
    return rows


def _class_row(p: Point, c: Summary) -> list[str]:
    return [
        _on(p),
        c.name,
        f"{c.offered_rps:,.1f}",
        f"{c.served_rps:,.1f}",
        _pct(c.goodput, c.offered),
        _pct(c.shed, c.offered),
        str(c.timeouts),
        fmt_latency(c.latency_p95_ms),
        fmt_latency(c.latency_p99_ms),
    ]


def render(results: OverloadResults, machine: Machine, command: str, seconds: float) -> str:
    overload = [p for p in results.points if p.scenario.startswith(("synthetic", "real"))]
    gateways = [p for p in results.points if p.scenario == GATEWAYS_SCENARIO]
    noisy = [p for p in results.points if p.scenario == "noisy neighbour"]
    capacity = ", ".join(f"{name} {rps:.1f} req/s" for name, rps in results.capacity.items())
    parts = [
        "## Overload: admission control, priority shedding, deadlines",
        f"Command: `{command}`  \n"
        f"Date: {machine.date}  \n"
        f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
        f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; the load generator runs on the "
        f"same machine as the gateway and workers.  \n"
        f"Open-loop, Poisson arrivals, {seconds:g} s per point; requests of {TEXTS[0]} texts, "
        f"deadline (`X-Timeout-Ms`) {DEADLINE_MS} ms (batch tenant {BATCH_DEADLINE_MS} ms); "
        f"latency budget {LATENCY_BUDGET_MS} ms; synthetic backend 50 ms per call + 5 ms per text. "
        f"Goodput = served within the request's deadline, measured from its intended send "
        f"time. Capacity measured first (served req/s when offered 3× a guess, admission "
        f"on): {capacity}.",
        "### Overload",
        markdown_table(
            [
                "scenario",
                "offered",
                "admission",
                "offered req/s",
                "served req/s",
                "goodput req/s",
                "goodput / capacity",
                "shed",
                "timeouts",
                "errors",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "p99 rejection ms",
                "client behind",
            ],
            _overload_rows(overload),
            "llllrrrrrrrrrrl",
        ),
        "### Several gateways: one promise, whatever their number",
        "`headway up --gateways N`, synthetic backend, 2 replicas, admission on; the load "
        "spread evenly over the gateways (one Poisson stream each, 1/N of the rate). Each "
        "gateway sizes its limit for its own share of the pool: Little's law on what it "
        "completes, and a share of the floor measured from the workers' completed-texts "
        "counters. Goal: p95 within the budget and goodput ≥ 95% of capacity with 1, 3 "
        "and 5 gateways. CPU: cores used during the run by all gateways, all workers and "
        "the load generator.",
        markdown_table(
            [
                "gateways",
                "offered",
                "offered req/s",
                "goodput req/s",
                "goodput / capacity",
                "shed",
                "timeouts",
                "errors",
                "p50 ms",
                "p95 ms",
                "p95 / budget",
                "CPU cores: gateways / workers / client",
                "client behind",
            ],
            _gateways_rows(gateways),
            "rlrrrrrrrrrll",
        ),
        "### Noisy neighbour: batch tenant at 3× capacity, interactive tenant at 0.5×",
        markdown_table(
            [
                "admission",
                "tenant",
                "offered req/s",
                "served req/s",
                "served in time",
                "shed",
                "timeouts",
                "p95 ms",
                "p99 ms",
            ],
            [_class_row(p, c) for p in noisy for c in p.result.report.classes],
            "llrrrrrrr",
        ),
    ]
    return "\n\n".join(parts)
