"""ONNX Runtime alone, in this process: the ceiling the serving path is measured against.

Each step does what a worker does for one batch, minus HTTP, msgpack and the
queue: tokenize the texts (``encode_texts``), plan model calls, and run them.
"Sorted" batches are planned by ``plan_runs``, which sorts by length and cuts
the batch into calls exactly as the worker's batcher does; "unsorted" runs the
batch as one call padded to its longest text, for contrast. Batches are
consecutive slices of the corpus, taken round-robin for ``seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from headway.models.backend import Backend
from headway.worker.planning import padded_tokens, plan_runs
from headway_tools.bench.stats import per_second

WARMUP_BATCHES = 3


@dataclass(frozen=True, slots=True)
class RawPoint:
    """One batch size's throughput; ``padding`` is tokens computed per real token."""

    batch: int
    length_sorted: bool
    sentences_per_s: float
    calls_per_batch: float
    padding: float


def batches_of(corpus: Sequence[str], size: int) -> list[list[str]]:
    """Consecutive, full batches of ``size`` texts."""
    return [list(corpus[i : i + size]) for i in range(0, len(corpus) - size + 1, size)]


def run_point(
    backend: Backend,
    corpus: Sequence[str],
    *,
    batch: int,
    length_sorted: bool,
    seconds: float,
    max_batch_tokens: int,
) -> RawPoint:
    batches = batches_of(corpus, batch)
    for texts in batches[:WARMUP_BATCHES]:
        _step(backend, texts, length_sorted, max_batch_tokens)
    sentences = calls = computed = real = 0
    started = time.perf_counter()
    stop_at = started + seconds
    step = 0
    while time.perf_counter() < stop_at:
        texts = batches[step % len(batches)]
        step += 1
        n_calls, n_computed, n_real = _step(backend, texts, length_sorted, max_batch_tokens)
        sentences += len(texts)
        calls += n_calls
        computed += n_computed
        real += n_real
    elapsed = time.perf_counter() - started
    return RawPoint(
        batch=batch,
        length_sorted=length_sorted,
        sentences_per_s=per_second(sentences, elapsed),
        calls_per_batch=calls / step,
        padding=computed / real,
    )


def _step(
    backend: Backend, texts: Sequence[str], length_sorted: bool, max_batch_tokens: int
) -> tuple[int, int, int]:
    """One batch: (model calls, tokens computed with padding, real tokens)."""
    encoded = backend.encode_texts(texts)
    lengths = [item.n_tokens for item in encoded]
    runs = (
        plan_runs(lengths, max_batch_tokens, backend.call_overhead_tokens)
        if length_sorted
        else [list(range(len(encoded)))]
    )
    for run in runs:
        backend.run([encoded[i] for i in run])
    return len(runs), padded_tokens(lengths, runs), sum(lengths)
