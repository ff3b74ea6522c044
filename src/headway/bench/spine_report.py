"""The spine benchmark's figures as a Markdown section (``headway bench spine``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from headway.bench.host import Machine
from headway.bench.raw import RawPoint
from headway.bench.served import CLIENT, GATEWAY, WORKER, LoadPoint
from headway.bench.spine import BATCH_SIZES, CONCURRENCY, CPU_CONCURRENCY, SpineResults
from headway.bench.stats import fmt_ms, fmt_rate, fmt_ratio, markdown_table
from headway.loadgen import ClosedLoopResult
from headway.loadgen.corpus import DEFAULT_SEED
from headway.quantile import quantile

SECTION = "spine"
QUANTILES = (0.50, 0.90, 0.99)  # of the latency table


def render(results: SpineResults, machine: Machine, command: str, seconds: float) -> str:
    return "\n\n".join(
        [
            _header(results, machine, command, seconds),
            "### 1. Raw ONNX Runtime",
            _raw_table(results.raw),
            "### 2. Through the worker and through the gateway",
            _served_intro(results),
            _served_table(results.served, results.raw),
            "### 3. Gateway overhead (synthetic backend at zero cost)",
            _latency_intro(results),
            _latency_table(results.overhead.latency),
            _cpu_intro(seconds),
            _cpu_table(results.overhead.cpu),
        ]
    )


def _header(r: SpineResults, m: Machine, command: str, seconds: float) -> str:
    lengths = r.token_lengths
    return (
        "## Spine: raw model, worker, gateway\n\n"
        f"Command: `{command}`  \n"
        f"Date: {m.date}  \n"
        f"Machine: {m.nproc} CPUs (nproc), {m.cpu_model}, {m.kernel}; Python {m.python}, "
        f"ONNX Runtime {r.onnxruntime}; 1-minute load average {m.load_average:.2f} at start  \n"
        f"Model: {r.model.name} (version `{r.model.version[:12]}`), one intra-op thread "
        f"everywhere; {seconds:g} s per throughput point.  \n"
        f"Corpus: {len(lengths):,} generated sentences (seed {DEFAULT_SEED}), "
        f"{min(lengths)}–{max(lengths)} tokens, median {statistics.median(lengths):g}."
    )


def _raw_table(points: Sequence[RawPoint]) -> str:
    rows = [
        [
            str(p.batch),
            "—" if p.batch == 1 else ("by length (`plan_runs`)" if p.length_sorted else "none"),
            fmt_rate(p.sentences_per_s),
            f"{p.calls_per_batch:.2f}",
            f"{p.padding:.2f}",
        ]
        for p in points
    ]
    header = ["batch", "grouping", "sentences/s", "model calls/batch", "tokens computed/real"]
    return markdown_table(header, rows, "rlrrr")


def _served_intro(r: SpineResults) -> str:
    return (
        f"One worker and one gateway (`Supervisor`, as `headway up` starts them); a closed-loop "
        f"client keeps {CONCURRENCY} requests outstanding, each of 1, 8 or 32 texts. "
        f"The gateway splits requests above {r.settings.gateway.chunk_texts} texts into "
        f"balanced chunks. {_admission(r)} "
        "*vs raw* compares with raw length-planned batches of the same size. "
        "*Cores*: CPU seconds per wall second of each process over the run "
        "(the client is this benchmark)."
    )


def _admission(r: SpineResults) -> str:
    admission = r.settings.gateway.admission
    text = (
        "The gateway rows run with admission control off, so they show the cost of the path alone."
    )
    if not admission.enabled:
        return text
    return text + (
        f" The last row repeats {max(BATCH_SIZES)} texts with admission on, as `headway up` "
        f"runs it (latency budget {admission.latency_budget_ms:g} ms: about throughput × "
        "budget texts may be outstanding); a refused request is answered 503 at once, "
        "counted under *errors*, and its client sends the next one immediately."
    )


def _errors(result: ClosedLoopResult) -> str:
    total = sum(result.errors.values())
    if not total:
        return "0"
    reasons = ", ".join(f"{reason}: {n}" for reason, n in result.errors.most_common())
    return f"{total} ({reasons})"


def _latency(result: ClosedLoopResult, q: float) -> str:
    return fmt_ms(quantile(result.latencies_s, q)) if result.latencies_s else "n/a"


def _served_table(points: Sequence[LoadPoint], raw: Sequence[RawPoint]) -> str:
    raw_rate = {p.batch: p.sentences_per_s for p in raw if p.length_sorted}
    rows = [
        [
            p.label,
            str(p.texts_per_request),
            fmt_rate(p.sentences_per_s),
            fmt_ratio(p.sentences_per_s / raw_rate[p.texts_per_request]),
            _latency(p.result, 0.50),
            _latency(p.result, 0.99),
            f"{p.cores(WORKER):.2f}",
            f"{p.cores(GATEWAY):.2f}",
            f"{p.cores(CLIENT):.2f}",
            _errors(p.result),
        ]
        for p in points
    ]
    header = [
        "path",
        "texts/request",
        "sentences/s",
        "vs raw",
        "p50 ms",
        "p99 ms",
        "worker cores",
        "gateway cores",
        "client cores",
        "errors",
    ]
    return markdown_table(header, rows, "l" + "r" * 9)


def _latency_intro(r: SpineResults) -> str:
    n = min(p.result.requests for p in r.overhead.latency.values())
    return (
        f"Latency of 1-text requests sent one at a time ({n:,} or more per path): straight to "
        "the worker (msgpack, as the gateway sends them) and through the gateway (JSON, "
        "authenticated). Both include the worker's batch-fill wait of up to "
        f"{r.settings.worker.max_wait_ms:g} ms, so the difference is what the gateway adds."
    )


def _latency_table(latency: Mapping[str, LoadPoint]) -> str:
    worker, gateway = latency[WORKER].result, latency[GATEWAY].result
    rows = [
        [name, f"{res.requests:,}", *(_latency(res, q) for q in QUANTILES), _errors(res)]
        for name, res in (("worker, direct", worker), ("through the gateway", gateway))
    ]
    added = [
        fmt_ms(quantile(gateway.latencies_s, q) - quantile(worker.latencies_s, q))
        if worker.latencies_s and gateway.latencies_s
        else "n/a"
        for q in QUANTILES
    ]
    rows.append(["**added by the gateway**", "", *(f"**{a}**" for a in added), ""])
    header = ["path", "requests", "p50 ms", "p90 ms", "p99 ms", "errors"]
    return markdown_table(header, rows, "l" + "r" * 5)


def _cpu_intro(seconds: float) -> str:
    return (
        f"CPU per request at {CPU_CONCURRENCY} requests outstanding, 1 text each, "
        f"{seconds:g} s per path: utime + stime of each process from `/proc/<pid>/stat`, "
        "divided by the requests completed."
    )


def _cpu_table(cpu: Mapping[str, LoadPoint]) -> str:
    rows = []
    for name, path in (("worker, direct", WORKER), ("through the gateway", GATEWAY)):
        p = cpu[path]
        rows.append(
            [
                name,
                fmt_rate(p.requests_per_s),
                "—" if path == WORKER else f"{p.cpu_us_per_request(GATEWAY):,.0f}",
                f"{p.cpu_us_per_request(WORKER):,.0f}",
                f"{p.cpu_us_per_request(CLIENT):,.0f}",
                _errors(p.result),
            ]
        )
    header = [
        "path",
        "requests/s",
        "gateway µs/request",
        "worker µs/request",
        "client µs/request",
        "errors",
    ]
    return markdown_table(header, rows, "l" + "r" * 5)
