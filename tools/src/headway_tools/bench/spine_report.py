"""The spine benchmark's figures as a Markdown section (``headway bench spine``)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from headway.quantile import quantile
from headway_tools.bench.host import Machine
from headway_tools.bench.memory import WARM_REQUESTS, WARM_TEXTS, ProcessMemory, total
from headway_tools.bench.raw import RawPoint
from headway_tools.bench.replicas import worker_cores
from headway_tools.bench.served import CLIENT, GATEWAY, WORKER, LoadPoint
from headway_tools.bench.spine import (
    BATCH_SIZES,
    CONCURRENCY,
    CPU_CONCURRENCY,
    REPLICA_CONCURRENCY,
    REPLICA_TEXTS,
    SpineResults,
)
from headway_tools.bench.stats import fmt_ms, fmt_rate, fmt_ratio, markdown_table
from headway_tools.loadgen import ClosedLoopResult
from headway_tools.loadgen.corpus import DEFAULT_SEED

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
            *_refusal_section(results, seconds),
            *_replica_section(results, machine),
            *_memory_section(results),
        ]
    )


def _header(r: SpineResults, m: Machine, command: str, seconds: float) -> str:
    lengths = r.token_lengths
    return (
        "## Spine: raw model, worker, gateway\n\n"
        f"Command: `{command}`  \n"
        f"Date: {m.date}  \n"
        f"Commit: `{m.commit}` (CPU: {m.cpu_model})  \n"
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
        "The gateway rows run with admission control off, so they show the cost of the path alone, "
        "and all of them with the results cache off (the corpus is sent again and again)."
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
        f"authenticated). The worker's batch wait is {r.settings.worker.batch_wait} (at most "
        f"{r.settings.worker.max_wait_ms:g} ms; adaptive waits nothing at idle); both paths "
        "include it, so the difference is what the gateway adds."
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
        "divided by the requests completed. Every text is new, so every request is computed "
        "(the results cache looks each up and misses)."
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


def _refusal_section(r: SpineResults, seconds: float) -> list[str]:
    """What a refusal costs, when it was measured."""
    if not r.refusals:
        return []
    intro = (
        f"CPU per refusal, {CPU_CONCURRENCY} requests of 1 text outstanding, {seconds:g} s "
        "each, every answer a refusal, on fresh stacks: a tenant whose bucket is empty "
        "(rate 0.001 texts/s, burst 1, spent first) refused before its body is parsed, and a "
        "pool held full by one long request (admission's static limit of 1 text), refused "
        "likewise. The CPU of the gateway and of the client (this benchmark) divided by the "
        "answers."
    )
    rows = [
        [
            p.kind,
            f"{p.answers:,}",
            fmt_rate(p.per_second),
            f"{p.gateway_us:,.1f}",
            f"{p.client_us:,.1f}",
        ]
        for p in r.refusals
    ]
    header = ["refusal", "answers", "answers/s", "gateway µs/answer", "client µs/answer"]
    return [intro, markdown_table(header, rows, "l" + "r" * 4)]


def _replica_section(r: SpineResults, m: Machine) -> list[str]:
    """Section 4, when it was measured."""
    if not r.replicas:
        return []
    intro = (
        f"Fresh stacks of 1 and of 2 embed workers behind one gateway (admission and the "
        "results cache off), a "
        f"closed loop of {REPLICA_CONCURRENCY} requests of {REPLICA_TEXTS} texts outstanding. "
        "Each worker runs one intra-op thread: a busy worker is one core, and no thread "
        f"spins waiting for work. On {m.nproc} cores, *vs 1 replica* would ideally read "
        f"{min(m.nproc, len(r.replicas)):.2f}×; *worker cores* adds up every worker."
    )
    return ["### 4. Embed replicas on this machine", intro, _replica_table(r.replicas)]


def _replica_table(points: Sequence[LoadPoint]) -> str:
    one = points[0].sentences_per_s
    rows = [
        [
            p.note,
            fmt_rate(p.sentences_per_s),
            fmt_ratio(p.sentences_per_s / one),
            _latency(p.result, 0.50),
            _latency(p.result, 0.99),
            f"{worker_cores(p):.2f}",
            f"{p.cores(GATEWAY):.2f}",
            f"{p.cores(CLIENT):.2f}",
            _errors(p.result),
        ]
        for p in points
    ]
    header = [
        "stack",
        "sentences/s",
        "vs 1 replica",
        "p50 ms",
        "p99 ms",
        "worker cores",
        "gateway cores",
        "client cores",
        "errors",
    ]
    return markdown_table(header, rows, "l" + "r" * 8)


def _memory_section(r: SpineResults) -> list[str]:
    """Section 5, when it was measured."""
    if not r.memory:
        return []
    intro = (
        "Every process of `headway up`'s default stack (one embed worker: with no "
        "cross-encoder in the registry the rerank pool's worker waits, unstarted, and the "
        "embed pool scores rerank by cosine), after "
        f"{WARM_REQUESTS} embed and {WARM_REQUESTS} rerank requests "
        f"of {WARM_TEXTS} texts, from `/proc/<pid>/smaps_rollup`. PSS divides each shared "
        "page among the processes that map it, so it sums to what the stack holds; *anon* "
        "is heap, *file* is code and mapped weights. *heap*: each worker copies the "
        "model's weights and MLAS's pre-packed ones onto its heap "
        "(`worker.mapped_weights = false`); *mapped* (the default): every worker maps the "
        "version's one prepared copy."
    )
    return ["### 5. Memory of the default stack", intro, _memory_table(r.memory)]


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def _memory_table(modes: Sequence[tuple[str, Sequence[ProcessMemory]]]) -> str:
    rows = []
    for label, processes in modes:
        for p in processes:
            rows.append([p.name, label, _mb(p.rss), _mb(p.pss), _mb(p.pss_anon), _mb(p.pss_file)])
        whole = total(processes)
        figures = (whole.rss, whole.pss, whole.pss_anon, whole.pss_file)
        rows.append(["**all**", f"**{label}**", *(f"**{_mb(n)}**" for n in figures)])
    header = ["process", "weights", "RSS MB", "PSS MB", "PSS anon MB", "PSS file MB"]
    return markdown_table(header, rows, "llrrrr")
