"""``headway bench batches``' Markdown section, with each goal and whether it was met."""

from __future__ import annotations

from collections.abc import Mapping

from headway_tools.bench.batches import (
    BATCH_KEY,
    CALIBRATION_S,
    CONCURRENCIES,
    DEADLINE_MS,
    LOAD_X,
    MODEL,
    P95_GOAL,
    TEXTS_PER_LINE,
    THROUGHPUT_GOAL,
    BatchesResults,
    Contention,
)
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import fmt_latency, markdown_table
from headway_tools.loadgen import Summary

SECTION = "batches"


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _share(part: float, whole: float) -> str:
    return "n/a" if whole <= 0 else f"{part / whole:.1%}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _not_200(counts: Mapping[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))


def _row(name: str, summary: Summary) -> list[str]:
    return [
        name,
        f"{summary.offered_rps:,.1f}",
        f"{summary.served_rps:,.1f}",
        _share(summary.goodput, summary.offered),
        str(summary.shed),
        str(summary.timeouts),
        fmt_latency(summary.latency_p50_ms),
        fmt_latency(summary.latency_p95_ms),
        fmt_latency(summary.latency_p99_ms),
    ]


def _contention_line(c: Contention) -> str:
    change = c.p95_change
    ok = change is not None and change <= P95_GOAL
    ran = (
        "ran throughout"
        if c.batch_ran_throughout
        else "**ended before the load did** (the second run was not all beside it)"
    )
    return (
        f"Beside the batch the interactive p95 changed by {_percent(change)} (goal ≤ "
        f"{P95_GOAL:+.0%}): {_met(ok)}. The batch ({c.batch_lines:,} lines) {ran}, and "
        f"completed {c.batch_lines_meanwhile:,} lines meanwhile ({c.batch_texts_per_s:,.1f} "
        "texts/s)."
    )


def render(results: BatchesResults, machine: Machine, command: str) -> str:
    t, c = results.throughput, results.contention
    return "\n\n".join(
        [
            "## Batches: throughput of the Batch API, and the interactive tenant beside a batch",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; 1-minute load average "
            f"{machine.load_average:.2f} at start; the load generator, the executor and every "
            "process on the same machine.",
            f"`headway up` with the real model ({MODEL}), 1 replica, admission on, the results "
            f"cache off (every text computed). Each line: {TEXTS_PER_LINE} sentences of the "
            "corpus as one `/v1/embeddings` body.",
            f"**Throughput on an idle pool.** {t.lines:,} lines ({t.texts:,} texts). "
            f"Synchronous: {t.sync_concurrency} closed-loop clients of the interactive tenant "
            "(the fewest of "
            f"{', '.join(str(c) for c in CONCURRENCIES)} that served within 5% of the most in "
            f"{CALIBRATION_S:g} s each) posting the lines' bodies to `/v1/embeddings` until "
            f"every text is served (requests not answered 200: {_not_200(t.sync_shed)}; sent "
            "again). Batch: the "
            f"same lines uploaded by `{BATCH_KEY}`'s tenant (batch tier), timed from the "
            f"create request until the batch reads `completed`. Goal: the batch ≥ "
            f"{THROUGHPUT_GOAL:.0%} of the synchronous rate.",
            markdown_table(
                ["path", "seconds", "texts/s", "batch / synchronous", "goal"],
                [
                    ["synchronous API", f"{t.sync_s:.2f}", f"{t.sync_texts_per_s:,.1f}", "", ""],
                    [
                        "Batch API",
                        f"{t.batch_s:.2f}",
                        f"{t.batch_texts_per_s:,.1f}",
                        f"{t.ratio:.1%}",
                        _met(t.ratio >= THROUGHPUT_GOAL),
                    ],
                ],
                "lrrrl",
            ),
            f"**The interactive tenant beside a batch.** Open-loop Poisson, requests of "
            f"{TEXTS_PER_LINE} texts at {LOAD_X:.0%} of the synchronous capacity above "
            f"({c.rate_rps:,.1f} req/s), deadline (`X-Timeout-Ms`) {DEADLINE_MS} ms, "
            f"{results.seconds:g} s alone, then {results.seconds:g} s with a batch running "
            "(the load starts once its first lines are answered; the batch is cancelled "
            f"after). Goal: the p95 at most {P95_GOAL:.0%} worse beside the batch.",
            markdown_table(
                [
                    "interactive tenant",
                    "offered req/s",
                    "served req/s",
                    "within deadline",
                    "shed",
                    "timeouts",
                    "p50 ms",
                    "p95 ms",
                    "p99 ms",
                ],
                [_row("alone", c.alone), _row("beside a batch", c.beside)],
                "lrrrrrrrr",
            ),
            _contention_line(c),
        ]
    )
