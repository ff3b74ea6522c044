"""``headway bench batching``: what dynamic batching buys on an accelerator-like model.

One worker of the synthetic backend (a call costs ``call_ms + text_ms × texts`` of
waiting, 50 + 5 ms by default) behind one gateway, at ``max_batch_size`` 1, 8 and 32,
each on fresh processes. A replica's ceiling at batch ``n`` is ``n / (call + text × n)``
texts/s (18.2, 88.9 and 152 at the defaults); each point measures how near to it the
whole path gets.

Saturation is measured with the load generator's closed loop keeping
``OUTSTANDING_BATCHES`` full batches of texts outstanding: while one batch runs, the
others are queued whole, so the model never waits for work, and nothing is refused or
times out. Eight, not two: an answer leaves the gateway only after its durable usage
write (SQLite, fsynced), and on this machine's shared disk an fsync now and then takes
~100 ms; with one to three batches queued behind the running one, batch 1 reached 64–93%
of its bound through the gateway (97% straight to the worker, and through the gateway
with the data directory on tmpfs), with seven queued 96–97%. (An open loop above
capacity would reach the same ceiling, but only by filling the worker's queue to its
bound and counting the refusals; with admission on, the gateway would keep the queue
short of a full batch.) Requests carry a quarter of a batch each (1 text at batch 1),
below the gateway's fan-out chunk, so whole requests fill batches exactly. The gateway
runs without admission control and without the results cache (the corpus repeats; a
cached text never reaches the model). The worker's own ``headway_worker_batch_texts``
shows how full its batches were.

``run_batching_bench`` measures and returns ``BatchingResults``;
``batching_report.render`` writes them as the Markdown section ``batching``.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.settings import Settings
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.raw import batches_of
from headway_tools.bench.served import (
    API_KEY,
    GATEWAY,
    LoadPoint,
    Processes,
    bench_settings,
    demo_registry,
    gateway_traffic,
    measure,
    serving,
)
from headway_tools.loadgen.corpus import sentences

MAX_BATCH_SIZES = (1, 8, 32)
OUTSTANDING_BATCHES = 8
CORPUS_SIZE = 2048


def request_shape(max_batch_size: int) -> tuple[int, int]:
    """(texts per request, requests outstanding): a quarter of a batch per request, and
    ``OUTSTANDING_BATCHES`` batches of texts outstanding."""
    texts = max(1, max_batch_size // 4)
    return texts, OUTSTANDING_BATCHES * max_batch_size // texts


@dataclass(frozen=True, slots=True)
class Batches:
    """The worker's batches over a run (``headway_worker_batch_texts``): count and texts."""

    count: int
    texts: int

    @property
    def mean_texts(self) -> float:
        return self.texts / self.count if self.count else float("nan")

    def __sub__(self, before: Batches) -> Batches:
        return Batches(self.count - before.count, self.texts - before.texts)


@dataclass(frozen=True, slots=True)
class BatchingPoint:
    """One max batch size at saturation: the closed-loop run and the worker's batches."""

    max_batch_size: int
    load: LoadPoint
    batches: Batches


@dataclass(frozen=True, slots=True)
class BatchingResults:
    """The points, and the synthetic model's cost per call and per text (seconds)."""

    call_s: float
    text_s: float
    points: Sequence[BatchingPoint]

    def bound_texts_per_s(self, max_batch_size: int) -> float:
        """What one replica serves when every call holds ``max_batch_size`` texts."""
        return max_batch_size / (self.call_s + self.text_s * max_batch_size)


def stack_settings(data_dir: Path, max_batch_size: int) -> Settings:
    return bench_settings(
        data_dir,
        {"backend": "synthetic", "max_batch_size": max_batch_size},
        {"admission": {"enabled": False}, "cache": {"enabled": False}},
    )


def run_batching_bench(data_dir: Path, *, seconds: float) -> BatchingResults:
    """Each max batch size on a fresh worker and gateway, ``seconds`` at saturation."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, not {seconds}")
    settings = stack_settings(data_dir, MAX_BATCH_SIZES[0])
    record = synthetic_record(settings.worker.synthetic)
    demo_registry(settings).add_model(record, (SYNTHETIC_ALIAS,))
    corpus = sentences(CORPUS_SIZE)
    points = []
    for size in MAX_BATCH_SIZES:
        with serving(stack_settings(data_dir, size)) as processes:
            points.append(asyncio.run(_point(processes, size, corpus, seconds)))
    synthetic = settings.worker.synthetic
    return BatchingResults(synthetic.call_ms / 1000, synthetic.text_ms / 1000, points)


async def _point(
    processes: Processes, max_batch_size: int, corpus: Sequence[str], seconds: float
) -> BatchingPoint:
    texts, concurrency = request_shape(max_batch_size)
    traffic = gateway_traffic(
        processes.gateway_url, batches_of(corpus, texts), SYNTHETIC_ALIAS, API_KEY
    )
    await traffic.run(concurrency=concurrency, requests=2 * concurrency)  # warm the path
    before = await asyncio.to_thread(worker_batches, processes.worker_url)
    load = await measure(
        traffic,
        processes,
        path=GATEWAY,
        texts_per_request=texts,
        concurrency=concurrency,
        warmup=0,  # done above, outside the worker's batch counts
        duration_s=seconds,
    )
    after = await asyncio.to_thread(worker_batches, processes.worker_url)
    if load.result.requests == 0:
        raise ServingFailed(f"max batch {max_batch_size}: no request served ({load.result.errors})")
    return BatchingPoint(max_batch_size, load, after - before)


def worker_batches(worker_url: str) -> Batches:
    """The worker's batch count and texts so far, from its /metrics."""
    with urllib.request.urlopen(worker_url + "/metrics", timeout=5) as response:
        exposition = response.read().decode()
    count = texts = 0.0
    for family in text_string_to_metric_families(exposition):
        if family.name == "headway_worker_batch_texts":
            for sample in family.samples:
                if sample.name.endswith("_count"):
                    count += sample.value
                elif sample.name.endswith("_sum"):
                    texts += sample.value
    return Batches(int(count), int(texts))
