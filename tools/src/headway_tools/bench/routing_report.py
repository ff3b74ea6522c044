"""The routing scenarios as a Markdown section, with the goals beside the figures."""

from __future__ import annotations

from collections.abc import Sequence

from headway_tools.bench.host import Machine
from headway_tools.bench.overload import DEADLINE_MS, TEXTS
from headway_tools.bench.routing import (
    FANOUT_REQUESTS,
    FANOUT_TEXTS,
    FANOUT_WARMUP,
    HEDGE_LOAD,
    KILL_LOAD,
    FanOut,
    HedgeRun,
    KillRun,
    RoutingResults,
)
from headway_tools.bench.stats import fmt_latency, markdown_table
from headway_tools.loadgen import Summary

SECTION = "routing"


def _failed(s: Summary) -> int:
    return s.shed + s.quota + s.timeouts + s.errors


def _kill_rows(kills: Sequence[KillRun]) -> list[list[str]]:
    return [
        [
            k.label,
            f"{k.offered_rps:,.1f}",
            f"{k.killed_at_s:.1f} s / {k.restarted_at_s:.1f} s",
            str(k.result.report.overall.offered),
            str(k.result.report.overall.served),
            str(_failed(k.result.report.overall)),
            f"{k.result.report.overall.shed} / {k.result.report.overall.timeouts} / "
            f"{k.result.report.overall.errors}",
            fmt_latency(k.result.report.overall.latency_p95_ms),
            fmt_latency(k.result.report.overall.latency_p99_ms),
        ]
        for k in kills
    ]


def _timeline_rows(kills: Sequence[KillRun]) -> list[list[str]]:
    """One row a second: served / failed / p95 for each run side by side."""
    rows = []
    for second in range(len(kills[0].result.report.timeline)):
        row = [str(second)]
        for k in kills:
            s = k.result.report.timeline[second]
            event = ""
            if int(k.killed_at_s) == second:
                event = " ← killed"
            elif int(k.restarted_at_s) == second:
                event = " ← restarted"
            row += [f"{s.served}", f"{_failed(s)}", f"{fmt_latency(s.latency_p95_ms)}{event}"]
        rows.append(row)
    return rows


def _fan_out_rows(fan_outs: Sequence[FanOut]) -> list[list[str]]:
    one = next(f for f in fan_outs if f.replicas == 1)
    return [
        [
            str(f.replicas),
            str(f.chunk_texts),
            str(-(-FANOUT_TEXTS // f.chunk_texts)),
            fmt_latency(f.p50_s * 1000),
            fmt_latency(f.p95_s * 1000),
            f"{one.p50_s / f.p50_s:.2f}×",
        ]
        for f in fan_outs
    ]


def _hedge_rows(runs: Sequence[HedgeRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        baseline = next(r for r in runs if r.slow == run.slow and not r.hedging)
        s = run.result.report.overall
        chunks = max(1, run.counts.chunks)
        extra = run.worker_texts / baseline.worker_texts - 1 if baseline.worker_texts else 0.0
        rows.append(
            [
                run.slow.name,
                "on" if run.hedging else "off",
                f"{run.offered_rps:,.1f}",
                str(s.served),
                str(s.timeouts),
                fmt_latency(s.latency_p50_ms),
                fmt_latency(s.latency_p95_ms),
                fmt_latency(s.latency_p99_ms),
                fmt_latency(run.p99_ms()),
                _p99_cut(run, baseline),
                f"{run.counts.hedges / chunks:.1%} ({run.counts.hedges_won} won)",
                "—" if not run.hedging else f"{extra:+.1%}",
            ]
        )
    return rows


def _p99_cut(run: HedgeRun, baseline: HedgeRun) -> str:
    ours, theirs = run.p99_ms(), baseline.p99_ms()
    if run is baseline or not ours or theirs is None:
        return "—"
    return f"{theirs / ours:.2f}×"


def render(results: RoutingResults, machine: Machine, command: str, seconds: float) -> str:
    one = results.capacity[1]
    scale_rows = [
        [str(n), f"{rps:,.1f}", f"{rps / one:.2f}×", f"{rps / one / n:.2f}"]
        for n, rps in sorted(results.capacity.items())
    ]
    slow_capacity = ", ".join(
        f"{name}: {rps:.1f} req/s" for name, rps in results.slow_capacity.items()
    )
    parts = [
        "## Routing: failure, scale-out, fan-out, hedging",
        f"Command: `{command}`  \n"
        f"Date: {machine.date}  \n"
        f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
        f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; the load generator runs on the "
        f"same machine as the gateway and workers.  \n"
        f"Synthetic backend (50 ms per call + 5 ms per text, batches of up to 32 texts), "
        f"fresh processes per run as `headway up` starts them. Open-loop runs: Poisson "
        f"arrivals, requests of {TEXTS[0]} texts with deadline (`X-Timeout-Ms`) "
        f"{DEADLINE_MS} ms, {seconds:g} s; latency from each request's intended send time.",
        "### A replica SIGKILLed, then restarted",
        f"3 replicas at {KILL_LOAD:.0%} of their measured capacity "
        f"({results.capacity[3]:.1f} req/s); `embed-worker-0` is SIGKILLed a third into "
        "the run and started again (same address) a third later; with and without the "
        "retry on another replica, and with it but without admission control (while two "
        "replicas carry the load they run at 90%, where admission starts to shed). "
        "Failed = shed + timed out + errors; the kill and restart are marked in the second "
        "of the load's timeline they fell in.",
        markdown_table(
            [
                "run",
                "offered req/s",
                "killed / restarted at",
                "requests",
                "served",
                "failed",
                "shed / timeouts / errors",
                "p95 ms",
                "p99 ms",
            ],
            _kill_rows(results.kills),
            "lrlrrrrrr",
        ),
        "Per second (served / failed / p95 ms):",
        markdown_table(
            [
                "second",
                *(
                    f"{col} ({k.label})"
                    for k in results.kills
                    for col in ("served", "failed", "p95 ms")
                ),
            ],
            _timeline_rows(results.kills),
            "r" * (1 + 3 * len(results.kills)),
        ),
        "### Scale-out: saturation throughput",
        "Served req/s in the steady second half of a 10 s run offered 3× a guess of capacity "
        "(admission on, so the excess is shed, not queued). Goal: ≥ 0.95 × N.",
        markdown_table(
            ["replicas", "served req/s", "ratio to 1 replica", "ratio / N"], scale_rows, "rrrr"
        ),
        f"### Fan-out: one request of {FANOUT_TEXTS} texts",
        f"Requests one at a time (closed loop, concurrency 1), {FANOUT_REQUESTS} measured "
        f"after {FANOUT_WARMUP} warm-up ones. Chunk size 16 splits a request into 8 chunks "
        "sent in parallel; chunk size 128 sends it whole to one replica. Goal: 4 replicas "
        "≥ 3× faster than 1.",
        markdown_table(
            ["replicas", "chunk size", "chunks", "p50 ms", "p95 ms", "p50 speed-up vs 1"],
            _fan_out_rows(results.fan_outs),
            "rrrrrr",
        ),
        "### A slow replica, with and without hedging",
        f"3 replicas, one of them slow (not failing), at {HEDGE_LOAD:.0%} of the pool's "
        f"capacity measured with that replica in it ({slow_capacity}). Hedging sends a "
        "chunk not answered by the pool's recent p95 to another replica (one whose recent "
        "latency is under the time the chunk has waited) and cancels the loser. p99 (all) "
        "counts a request that timed out at the time its 504 came back (its deadline): the "
        "tail a client sees. Extra "
        "model work = texts the workers ran, against the run without hedging (same "
        "arrivals). Goal: p99 cut ≥ 2× for ≤ 5% extra load.",
        markdown_table(
            [
                "slow replica",
                "hedging",
                "offered req/s",
                "served",
                "timeouts",
                "p50 ms",
                "p95 ms",
                "p99 ms (served)",
                "p99 ms (all)",
                "p99 (all) cut",
                "hedged chunks",
                "extra model work",
            ],
            _hedge_rows(results.hedges),
            "llrrrrrrrrrr",
        ),
    ]
    return "\n\n".join(parts)
