"""``headway bench spine``: the request path's throughput and overhead, from the model out.

Three measurements on this machine, each read against the one before it:

1. **Raw ONNX Runtime** (``raw``): the default model in this process, one
   intra-op thread, at batch 1, 8 and 32 (length-planned as the worker does)
   and batch 32 unplanned, for contrast. This is the ceiling.
2. **Through the worker, then the gateway** (``served.throughput``): one
   worker and one gateway started by ``Supervisor`` as ``headway up`` starts
   them, driven by a closed-loop client with ``CONCURRENCY`` requests
   outstanding, each of 1, 8 or 32 texts, with the gateway's admission
   control off (the path's own cost); then 32 texts once more with admission
   on, as ``headway up`` runs it. Reported as sentences per second and as a
   fraction of raw at the same batch size.
3. **Gateway overhead** (``served.overhead``): the synthetic backend at zero
   cost, so what remains is the cost of serving. Latency of 1-text requests
   sent one at a time straight to the worker and through the gateway (the
   difference is what the gateway adds), then CPU microseconds per request of
   each process at ``CPU_CONCURRENCY`` requests outstanding.

The report is one Markdown section; with ``out`` it also replaces the text
between ``<!-- bench:spine:start -->`` and ``<!-- bench:spine:end -->`` there.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from headway.bench.closedloop import LoadResult
from headway.bench.corpus import DEFAULT_SEED, sentences
from headway.bench.errors import ServingFailed
from headway.bench.host import Machine
from headway.bench.raw import RawPoint, run_point
from headway.bench.served import (
    API_KEY,
    CLIENT,
    GATEWAY,
    WORKER,
    LoadPoint,
    Model,
    Overhead,
    bench_settings,
    overhead,
    serving,
    throughput,
)
from headway.bench.stats import (
    command_line,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    markdown_table,
    percentile,
    write_section,
)
from headway.catalog import SYNTHETIC_ALIAS, ensure_default_model, synthetic_record
from headway.models.store import ModelStore
from headway.registry.keys import key_digest
from headway.registry.sqlite import Registry
from headway.settings import Settings

SECTION = "spine"
BATCH_SIZES = (1, 8, 32)
CONCURRENCY = 4
CPU_CONCURRENCY = 16
LATENCY_REQUESTS = 2000
CORPUS_SIZE = 2048


@dataclass(frozen=True, slots=True)
class SpineResults:
    command: str
    machine: Machine
    seconds: float
    onnxruntime: str
    model: Model
    settings: Settings
    token_lengths: Sequence[int]
    raw: Sequence[RawPoint]
    served: Sequence[LoadPoint]
    overhead: Overhead


def run_spine_bench(data_dir: Path, *, seconds: float, out: Path | None) -> str:
    """Measure, return the Markdown section, and write it into ``out`` if given."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, not {seconds}")
    command = command_line(sys.argv)
    machine = Machine.here()
    onnx_settings = bench_settings(data_dir, {"backend": "onnx"})
    registry = Registry(onnx_settings.registry_path)
    registry.seed_demo()
    if key_digest(API_KEY) not in registry.snapshot().principals:
        raise ServingFailed(
            f"the registry in {data_dir} has tenants but not the demo key {API_KEY!r}, "
            "which the benchmark uses; point --data-dir at a fresh directory"
        )
    record = ensure_default_model(onnx_settings, registry)
    model = Model(onnx_settings.embed_model, record.version, record.dimensions)
    corpus = sentences(CORPUS_SIZE)

    raw, token_lengths, ort_version = _raw(onnx_settings, record.version, corpus, seconds)
    path_only = bench_settings(data_dir, {"backend": "onnx"}, {"admission": {"enabled": False}})
    with serving(path_only) as processes:
        served = asyncio.run(
            throughput(
                processes,
                model,
                corpus,
                paths=(WORKER, GATEWAY),
                batch_sizes=BATCH_SIZES,
                concurrency=CONCURRENCY,
                seconds=seconds,
            )
        )
    if onnx_settings.gateway.admission.enabled:
        with serving(onnx_settings) as processes:
            served += asyncio.run(
                throughput(
                    processes,
                    model,
                    corpus,
                    paths=(GATEWAY,),
                    batch_sizes=(max(BATCH_SIZES),),
                    concurrency=CONCURRENCY,
                    seconds=seconds,
                    note="admission on",
                )
            )

    zero_cost = bench_settings(
        data_dir, {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": 0}}
    )
    synthetic = synthetic_record(zero_cost.worker.synthetic)
    registry.add_model(synthetic, (SYNTHETIC_ALIAS,))  # before the gateway reads the registry
    with serving(zero_cost) as processes:
        costs = asyncio.run(
            overhead(
                processes,
                Model(SYNTHETIC_ALIAS, synthetic.version, synthetic.dimensions),
                corpus,
                latency_requests=LATENCY_REQUESTS,
                cpu_concurrency=CPU_CONCURRENCY,
                seconds=seconds,
            )
        )

    section = render(
        SpineResults(
            command,
            machine,
            seconds,
            ort_version,
            model,
            onnx_settings,
            token_lengths,
            raw,
            served,
            costs,
        )
    )
    if out is not None:
        write_section(out, SECTION, section)
    return section


def _raw(
    settings: Settings, version: str, corpus: Sequence[str], seconds: float
) -> tuple[list[RawPoint], list[int], str]:
    """Raw points, the corpus's token lengths, and the ONNX Runtime version."""
    import onnxruntime

    from headway.worker.backends.onnx import OnnxBackend

    stored = ModelStore(settings.model_root).get(version)
    backend = OnnxBackend.load(stored, intra_op_threads=1)
    token_lengths = [item.n_tokens for item in backend.encode_texts(corpus)]
    shapes = [(batch, True) for batch in BATCH_SIZES] + [(max(BATCH_SIZES), False)]
    points = [
        run_point(
            backend,
            corpus,
            batch=batch,
            length_sorted=length_sorted,
            seconds=seconds,
            max_batch_tokens=settings.worker.max_batch_tokens,
        )
        for batch, length_sorted in shapes
    ]
    return points, token_lengths, str(onnxruntime.__version__)


# the report -------------------------------------------------------------------


def render(results: SpineResults) -> str:
    return "\n\n".join(
        [
            _header(results),
            "### 1. Raw ONNX Runtime",
            _raw_table(results.raw),
            "### 2. Through the worker and through the gateway",
            _served_intro(results),
            _served_table(results.served, results.raw),
            "### 3. Gateway overhead (synthetic backend at zero cost)",
            _latency_intro(results),
            _latency_table(results.overhead.latency),
            _cpu_intro(results),
            _cpu_table(results.overhead.cpu),
        ]
    )


def _header(r: SpineResults) -> str:
    m = r.machine
    lengths = r.token_lengths
    return (
        "## Spine: raw model, worker, gateway\n\n"
        f"Command: `{r.command}`  \n"
        f"Date: {m.date}  \n"
        f"Machine: {m.nproc} CPUs (nproc), {m.cpu_model}, {m.kernel}; Python {m.python}, "
        f"ONNX Runtime {r.onnxruntime}; 1-minute load average {m.load_average:.2f} at start  \n"
        f"Model: {r.model.name} (version `{r.model.version[:12]}`), one intra-op thread "
        f"everywhere; {r.seconds:g} s per throughput point.  \n"
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


def _errors(result: LoadResult) -> str:
    total = sum(result.errors.values())
    if not total:
        return "0"
    reasons = ", ".join(f"{reason}: {n}" for reason, n in result.errors.most_common())
    return f"{total} ({reasons})"


def _latency(result: LoadResult, q: float) -> str:
    return fmt_ms(percentile(result.latencies_s, q)) if result.latencies_s else "n/a"


def _served_table(points: Sequence[LoadPoint], raw: Sequence[RawPoint]) -> str:
    raw_rate = {p.batch: p.sentences_per_s for p in raw if p.length_sorted}
    rows = [
        [
            p.label,
            str(p.texts_per_request),
            fmt_rate(p.sentences_per_s),
            fmt_ratio(p.sentences_per_s / raw_rate[p.texts_per_request]),
            _latency(p.result, 50),
            _latency(p.result, 99),
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
        [name, f"{res.requests:,}", *(_latency(res, q) for q in (50, 90, 99)), _errors(res)]
        for name, res in (("worker, direct", worker), ("through the gateway", gateway))
    ]
    added = [
        fmt_ms(percentile(gateway.latencies_s, q) - percentile(worker.latencies_s, q))
        for q in (50, 90, 99)
    ]
    rows.append(["**added by the gateway**", "", *(f"**{a}**" for a in added), ""])
    header = ["path", "requests", "p50 ms", "p90 ms", "p99 ms", "errors"]
    return markdown_table(header, rows, "l" + "r" * 5)


def _cpu_intro(r: SpineResults) -> str:
    return (
        f"CPU per request at {CPU_CONCURRENCY} requests outstanding, 1 text each, "
        f"{r.seconds:g} s per path: utime + stime of each process from `/proc/<pid>/stat`, "
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
