"""``headway bench spine``: the request path's throughput and overhead, from the model out.

Five measurements on this machine, the first three each read against the one before it:

1. **Raw ONNX Runtime** (``raw``): the default model in this process, one
   intra-op thread, at batch 1, 8 and 32 (length-planned as the worker does)
   and batch 32 unplanned, for contrast. This is the ceiling.
2. **Through the worker, then the gateway** (``served.throughput``): one
   worker and one gateway started by ``Supervisor`` as ``headway up`` starts
   them, driven by the load generator's closed loop with ``CONCURRENCY``
   requests outstanding, each of 1, 8 or 32 texts, with the gateway's admission
   control off (the path's own cost); then 32 texts once more with admission
   on, as ``headway up`` runs it. Reported as sentences per second and as a
   fraction of raw at the same batch size.
3. **Gateway overhead** (``served.overhead``): the synthetic backend at zero
   cost, so what remains is the cost of serving. Latency of 1-text requests
   sent one at a time straight to the worker and through the gateway (the
   difference is what the gateway adds), then CPU microseconds per request of
   each process at ``CPU_CONCURRENCY`` requests outstanding, every text new (the
   results cache misses: each request is computed); then what a refusal costs the
   gateway, a 429 of a tenant whose bucket is empty and a 503 of a full pool
   (``refusals``).
4. **Embed replicas** (``replicas``): the gateway path at ``REPLICA_TEXTS`` texts
   with 1 and then 2 embed workers: what a second worker process adds on this machine.
5. **Memory** (``memory``): RSS and PSS of every process of ``headway up``'s default
   stack, with each worker copying the model's weights onto its heap and with both
   workers mapping the one prepared copy (``worker.mapped_weights``, the default).

``run_spine_bench`` measures and returns ``SpineResults``; ``spine_report.render``
writes them as the Markdown section ``spine``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headway.catalog import SYNTHETIC_ALIAS, ensure_default_model, synthetic_record
from headway.models.store import ModelStore
from headway.settings import Settings
from headway_tools.bench.memory import ProcessMemory, default_stack_settings, stack_memory
from headway_tools.bench.raw import RawPoint, batches_of, run_point
from headway_tools.bench.refusals import RefusalPoint, measure_refusals
from headway_tools.bench.replicas import replica_points
from headway_tools.bench.served import (
    GATEWAY,
    WORKER,
    LoadPoint,
    Model,
    Overhead,
    bench_settings,
    demo_registry,
    overhead,
    serving,
    throughput,
)
from headway_tools.loadgen.corpus import sentences

BATCH_SIZES = (1, 8, 32)
CONCURRENCY = 4
CPU_CONCURRENCY = 16
LATENCY_REQUESTS = 2000
CORPUS_SIZE = 2048
NO_CACHE = {"cache": {"enabled": False}}
"""Sections 2 and 4 send the corpus again and again: with the results cache on, the model
would compute each text once and the rest would measure the cache."""
OVERHEAD_CORPUS_SIZE = 100_000  # more 1-text requests than a run sends: none is a cache hit
REPLICA_TEXTS = 32
REPLICA_CONCURRENCY = 8  # enough outstanding chunks to keep two replicas busy
MEMORY_MODES = (("heap", False), ("mapped", True))


@dataclass(frozen=True, slots=True)
class SpineResults:
    """Every figure of the report; ``settings`` are those the processes ran with."""

    onnxruntime: str
    model: Model
    settings: Settings
    token_lengths: Sequence[int]
    raw: Sequence[RawPoint]
    served: Sequence[LoadPoint]
    overhead: Overhead
    refusals: Sequence[RefusalPoint] = ()
    replicas: Sequence[LoadPoint] = ()
    memory: Sequence[tuple[str, Sequence[ProcessMemory]]] = ()


def run_spine_bench(data_dir: Path, *, seconds: float) -> SpineResults:
    """The five measurements, ``seconds`` per throughput point, on fresh processes."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, not {seconds}")
    onnx_settings = bench_settings(data_dir, {"backend": "onnx"}, NO_CACHE)
    registry = demo_registry(onnx_settings)
    record = ensure_default_model(onnx_settings, registry)
    model = Model(onnx_settings.embed_model, record.version, record.dimensions)
    corpus = sentences(CORPUS_SIZE)

    raw, token_lengths, ort_version = _raw(onnx_settings, record.version, corpus, seconds)
    path_only = bench_settings(
        data_dir, {"backend": "onnx"}, {"admission": {"enabled": False}, **NO_CACHE}
    )
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
    unique = sentences(OVERHEAD_CORPUS_SIZE, seed=CORPUS_SIZE)
    with serving(zero_cost) as processes:
        costs = asyncio.run(
            overhead(
                processes,
                Model(SYNTHETIC_ALIAS, synthetic.version, synthetic.dimensions),
                unique,
                latency_requests=LATENCY_REQUESTS,
                cpu_concurrency=CPU_CONCURRENCY,
                seconds=seconds,
            )
        )

    refusals = measure_refusals(
        data_dir, batches_of(unique, 1), concurrency=CPU_CONCURRENCY, seconds=seconds
    )
    replicas = replica_points(
        data_dir,
        model,
        corpus,
        texts=REPLICA_TEXTS,
        concurrency=REPLICA_CONCURRENCY,
        seconds=seconds,
    )
    memory = [
        (label, stack_memory(default_stack_settings(data_dir, mapped_weights=mapped)))
        for label, mapped in MEMORY_MODES
    ]
    return SpineResults(
        ort_version,
        model,
        onnx_settings,
        token_lengths,
        raw,
        served,
        costs,
        refusals,
        replicas,
        memory,
    )


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
