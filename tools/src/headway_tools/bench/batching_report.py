"""The batching benchmark's figures as a Markdown section (``headway bench batching``)."""

from __future__ import annotations

from headway.quantile import quantile
from headway_tools.bench.batching import OUTSTANDING_BATCHES, BatchingPoint, BatchingResults
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import fmt_ms, fmt_rate, fmt_ratio, markdown_table

SECTION = "batching"


def render(results: BatchingResults, machine: Machine, command: str, seconds: float) -> str:
    return "\n\n".join(
        [
            "## Batching: an accelerator-like model at max batch 1, 8 and 32",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; Python {machine.python}; "
            f"1-minute load average {machine.load_average:.2f} at start.",
            _intro(results, seconds),
            _table(results),
            _gains(results),
        ]
    )


def _intro(r: BatchingResults, seconds: float) -> str:
    call_ms, text_ms = r.call_s * 1000, r.text_s * 1000
    return (
        f"One worker of the synthetic backend ({call_ms:g} ms a model call + {text_ms:g} ms "
        "a text, spent waiting) behind one gateway, fresh processes for each "
        f"`worker.max_batch_size`; {seconds:g} s per point. A closed-loop client keeps "
        f"{OUTSTANDING_BATCHES} batches of texts outstanding (requests of a quarter of a "
        "batch, 1 text at max batch 1, below the gateway's fan-out chunk): while one batch "
        "runs, the next ones are queued whole, and the gateway's answer path (its durable "
        "usage write before each answer included) never leaves the model without work, so "
        "the rate is the replica's saturation throughput. The gateway runs without admission "
        "control and without the results cache. *Bound*: what one replica serves when "
        f"every call holds max batch texts, n / ({r.call_s:g} + {r.text_s:g} n) texts/s. "
        "*Texts/batch*: the worker's `headway_worker_batch_texts` over the run."
    )


def _table(r: BatchingResults) -> str:
    rows = []
    for p in r.points:
        bound = r.bound_texts_per_s(p.max_batch_size)
        rows.append(
            [
                str(p.max_batch_size),
                str(p.load.texts_per_request),
                str(p.load.concurrency),
                fmt_rate(bound),
                fmt_rate(p.load.sentences_per_s),
                f"{p.load.sentences_per_s / bound:.0%}",
                f"{p.batches.mean_texts:.2f}",
                _p50(p),
                str(sum(p.load.result.errors.values())),
            ]
        )
    header = [
        "max batch",
        "texts/request",
        "requests outstanding",
        "bound texts/s",
        "texts/s",
        "of bound",
        "texts/batch",
        "p50 ms",
        "errors",
    ]
    return markdown_table(header, rows, "r" * 9)


def _p50(p: BatchingPoint) -> str:
    latencies = p.load.result.latencies_s
    return fmt_ms(quantile(latencies, 0.5)) if latencies else "n/a"


def _gains(r: BatchingResults) -> str:
    first, *rest = r.points
    base = first.load.sentences_per_s
    gains = ", ".join(
        f"max batch {p.max_batch_size} {fmt_ratio(p.load.sentences_per_s / base)}" for p in rest
    )
    return f"Throughput against max batch {first.max_batch_size}: {gains}."
