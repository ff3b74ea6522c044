"""``headway bench batches``: the Batch API's throughput, and what a batch costs the
interactive tenant running beside it.

One system as ``headway up`` starts it (one worker of the real model, a gateway, the
batch executor), admission on, the results cache off (every text is computed: the
figures are the model's work, not the cache's). Each batch line is ``TEXTS_PER_LINE``
sentences of the project's corpus (``loadgen.corpus``), each line's body an
``/v1/embeddings`` request as a synchronous client would send it.

1. **Throughput on an idle pool.** The synchronous API first: closed-loop clients of
   the interactive tenant post the lines' bodies to ``/v1/embeddings`` until as many
   texts as the batch holds are served (what was shed is sent again): its texts/s is
   the pool's at saturation. How many clients saturate it depends on the admission
   limit the gateway learns, and clients beyond it only spin on 503s (stealing CPU
   from the pool), so each of ``CONCURRENCIES`` runs ``CALIBRATION_S`` first and the
   fewest that serve within 5% of the most are used. Then the same lines as a
   JSONL file uploaded by the batch tenant (``nightly-index``), a batch created, and
   the time from its creation until it reads ``completed``: texts/s. Goal: the batch
   reaches ``THROUGHPUT_GOAL`` of the synchronous rate.
2. **The interactive tenant beside a batch.** Open-loop Poisson load of requests of
   ``TEXTS_PER_LINE`` texts from the interactive tenant at ``LOAD_X`` of that
   capacity, first alone, then with a batch running meanwhile (large enough to
   outlast the run; once its first lines are answered the load starts, and the batch
   is cancelled after it). Goal: the p95 at most ``P95_GOAL`` worse beside the batch;
   the share served within the deadline is shown for both.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec

from headway.batches.model import FINAL
from headway.catalog import ensure_default_model
from headway.registry.open import open_registry
from headway.settings import Settings
from headway_tools.bench.errors import BenchError, ServingFailed
from headway_tools.bench.served import Traffic, bench_settings, gateway_traffic, serving
from headway_tools.loadgen import RequestClass, Schedule, Step, Summary, Workload, run_load
from headway_tools.loadgen.corpus import sentences

BATCH_KEY = "demo-key-nightly-index"
INTERACTIVE_KEY = "demo-key-search-app"
MODEL = "all-MiniLM-L6-v2"
TEXTS_PER_LINE = 4
LINE_SEED = 3
INTERACTIVE_WORDS = (10, 95)  # about the corpus sentences' 13-98 tokens
INTERACTIVE_SEED = 5
ARRIVAL_SEED = 11
DEADLINE_MS = 1000
CONCURRENCIES = (4, 8, 16, 32)
CALIBRATION_S = 3.0
ENOUGH = 0.95
"""More clients are worth it when they serve more than 1 / ENOUGH times as much."""
LOAD_X = 0.5
THROUGHPUT_GOAL = 0.95
P95_GOAL = 0.10
BATCH_MARGIN = 1.5
"""The contention batch holds this many times the texts the pool serves in the run."""
POLL_S = 0.05
BATCH_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 120.0


def line_texts(lines: int, seed: int = LINE_SEED) -> list[list[str]]:
    """``lines`` lines of ``TEXTS_PER_LINE`` corpus sentences, the same for the same seed."""
    texts = sentences(lines * TEXTS_PER_LINE, seed)
    return [texts[i : i + TEXTS_PER_LINE] for i in range(0, len(texts), TEXTS_PER_LINE)]


def batch_file(lines: Sequence[Sequence[str]], model: str = MODEL) -> bytes:
    """A JSONL batch input: one ``/v1/embeddings`` request per line."""
    encode = msgspec.json.Encoder().encode
    return b"".join(
        encode(
            {
                "custom_id": f"line-{number}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": model, "input": list(texts)},
            }
        )
        + b"\n"
        for number, texts in enumerate(lines, 1)
    )


def interactive_workload() -> Workload:
    search = RequestClass(
        "interactive",
        INTERACTIVE_KEY,
        model=MODEL,
        texts=(TEXTS_PER_LINE, TEXTS_PER_LINE),
        words=INTERACTIVE_WORDS,
        timeout_ms=DEADLINE_MS,
    )
    return Workload((search,), seed=INTERACTIVE_SEED)


def contention_lines(capacity_texts_per_s: float, seconds: float, most_lines: int) -> int:
    """Lines enough to keep the batch running through a run of ``seconds`` (it gets at
    most the capacity the interactive load leaves), within the batch limits."""
    wanted = math.ceil(BATCH_MARGIN * capacity_texts_per_s * seconds / TEXTS_PER_LINE)
    return max(1, min(most_lines, wanted))


def change(base: float | None, other: float | None) -> float | None:
    """``other`` relative to ``base`` (+0.10: 10% more); None when either is missing."""
    if base is None or other is None or base <= 0:
        return None
    return (other - base) / base


@dataclass(frozen=True, slots=True)
class Throughput:
    """The same texts through the synchronous API at saturation and as one batch."""

    lines: int
    texts: int
    sync_s: float
    sync_concurrency: int
    sync_shed: Mapping[str, int]
    """Requests the synchronous clients got no 200 for (sent again), by reason."""
    batch_s: float
    """From the create request to the batch read ``completed``."""

    @property
    def sync_texts_per_s(self) -> float:
        return self.texts / self.sync_s

    @property
    def batch_texts_per_s(self) -> float:
        return self.texts / self.batch_s

    @property
    def ratio(self) -> float:
        return self.batch_texts_per_s / self.sync_texts_per_s


@dataclass(frozen=True, slots=True)
class Contention:
    """The interactive tenant alone and beside a running batch."""

    rate_rps: float
    alone: Summary
    beside: Summary
    batch_lines: int
    batch_lines_meanwhile: int
    """Lines the batch completed while the interactive load ran beside it."""
    batch_ran_throughout: bool
    """False: the batch finished (or stopped) before the load did."""

    @property
    def p95_change(self) -> float | None:
        return change(self.alone.latency_p95_ms, self.beside.latency_p95_ms)

    @property
    def batch_texts_per_s(self) -> float:
        return self.batch_lines_meanwhile * TEXTS_PER_LINE / self.beside.seconds


@dataclass(frozen=True, slots=True)
class BatchesResults:
    throughput: Throughput
    contention: Contention
    seconds: float


# the Batch API, as the batch tenant calls it -------------------------------------------


class BatchClient:
    """The batch tenant's calls to one gateway: upload, create, read, cancel."""

    def __init__(self, gateway_url: str, key: str = BATCH_KEY) -> None:
        self._http = httpx.Client(
            base_url=gateway_url, headers={"authorization": f"Bearer {key}"}, timeout=60
        )

    def close(self) -> None:
        self._http.close()

    def _json(self, response: httpx.Response, what: str) -> dict[str, Any]:
        if response.status_code != 200:
            raise ServingFailed(f"{what}: status {response.status_code}: {response.text[:300]}")
        body: dict[str, Any] = response.json()
        return body

    def upload(self, data: bytes) -> str:
        response = self._http.post(
            "/v1/files",
            data={"purpose": "batch"},
            files={"file": ("bench.jsonl", data, "application/jsonl")},
        )
        return str(self._json(response, "uploading the batch input")["id"])

    def create(self, file_id: str) -> dict[str, Any]:
        body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
        return self._json(self._http.post("/v1/batches", json=body), "creating the batch")

    def get(self, batch_id: str) -> dict[str, Any]:
        return self._json(self._http.get(f"/v1/batches/{batch_id}"), "reading the batch")

    def cancel(self, batch_id: str) -> None:
        """Cancel it unless it has already ended (or is ending: finalizing)."""
        response = self._http.post(f"/v1/batches/{batch_id}/cancel")
        if response.status_code not in (200, 409):
            raise ServingFailed(f"cancelling {batch_id}: status {response.status_code}")

    def unfinished(self) -> list[str]:
        listed = self._json(self._http.get("/v1/batches", params={"limit": 100}), "listing")
        return [b["id"] for b in listed["data"] if b["status"] not in FINAL]

    def first_error(self, batch: Mapping[str, Any]) -> str:
        """The first line of the batch's error file, or its errors, for a failure report."""
        if batch.get("errors"):
            return str(batch["errors"])[:300]
        file_id = batch.get("error_file_id")
        if not file_id:
            return "no error file"
        content = self._http.get(f"/v1/files/{file_id}/content").content
        return content.split(b"\n", 1)[0].decode(errors="replace")[:300]

    def until(
        self, batch_id: str, done: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = self.get(batch_id)
            if done(batch):
                return batch
            time.sleep(POLL_S)
        raise ServingFailed(f"batch {batch_id}: timed out after {timeout_s:.0f}s waiting {what}")


def _final(batch: Mapping[str, Any]) -> bool:
    return batch["status"] in FINAL


@contextmanager
def batch_client(gateway_url: str) -> Iterator[BatchClient]:
    """A client on a gateway with no batch of the tenant's running: one an earlier run
    left behind (stopped midway) is cancelled, and waited for, first."""
    client = BatchClient(gateway_url)
    try:
        for batch_id in client.unfinished():
            client.cancel(batch_id)
            client.until(batch_id, _final, START_TIMEOUT_S, "for an old batch to end")
        yield client
    finally:
        client.close()


# 1. throughput ---------------------------------------------------------------------------


async def sync_run(traffic: Traffic, concurrency: int) -> tuple[float, Counter[str]]:
    """Seconds the synchronous API takes to serve every text of ``traffic``'s bodies (a
    request not answered 200 is sent again), and what was not answered 200, by reason."""
    target = sum(body.texts for body in traffic.bodies)
    served, elapsed, shed = 0, 0.0, Counter[str]()
    while served < target:
        requests = math.ceil((target - served) / TEXTS_PER_LINE)
        result = await traffic.run(concurrency=min(concurrency, requests), requests=requests)
        served, elapsed = served + result.texts, elapsed + result.elapsed_s
        shed.update(result.errors)
        if not result.requests:
            raise ServingFailed(f"the synchronous API served nothing: {dict(result.errors)}")
    return elapsed, shed


def batch_run(client: BatchClient, lines: Sequence[Sequence[str]]) -> float:
    """Seconds from creating a batch of ``lines`` until it reads ``completed``."""
    file_id = client.upload(batch_file(lines))
    started = time.perf_counter()
    batch = client.create(file_id)
    try:
        final = client.until(batch["id"], _final, BATCH_TIMEOUT_S, "for it to end")
    finally:
        client.cancel(batch["id"])
    took = time.perf_counter() - started
    counts = final["request_counts"]
    if final["status"] != "completed" or counts["completed"] != len(lines):
        raise ServingFailed(
            f"batch {batch['id']} ended {final['status']} with {counts}, not {len(lines)} lines "
            f"completed: {client.first_error(final)}"
        )
    return took


async def saturating_concurrency(traffic: Traffic) -> int:
    """The fewest of ``CONCURRENCIES`` closed-loop clients that serve within 5% of the most
    texts/s in ``CALIBRATION_S`` (the first run also warms the pool and the path)."""
    rates = {}
    for concurrency in CONCURRENCIES:
        result = await traffic.run(concurrency=concurrency, duration_s=CALIBRATION_S)
        rates[concurrency] = result.texts / result.elapsed_s if result.elapsed_s > 0 else 0.0
    best = max(rates.values())
    return next(c for c in CONCURRENCIES if rates[c] >= ENOUGH * best)


def throughput(gateway_url: str, client: BatchClient, lines: int) -> Throughput:
    texts = line_texts(lines)
    traffic = gateway_traffic(gateway_url, texts, MODEL, INTERACTIVE_KEY)
    concurrency = asyncio.run(saturating_concurrency(traffic))
    sync_s, shed = asyncio.run(sync_run(traffic, concurrency))
    batch_s = batch_run(client, texts)
    return Throughput(lines, lines * TEXTS_PER_LINE, sync_s, concurrency, shed, batch_s)


# 2. the interactive tenant beside a batch -------------------------------------------------


def open_loop(gateway_url: str, rate_rps: float, seconds: float) -> Summary:
    schedule = Schedule((Step(seconds, rate_rps),), arrivals="poisson", seed=ARRIVAL_SEED)
    run = run_load(
        gateway_url, interactive_workload(), schedule, client_timeout_s=DEADLINE_MS / 1000 + 1.0
    )
    return asyncio.run(run).report.overall


def contention(
    gateway_url: str,
    client: BatchClient,
    capacity_texts_per_s: float,
    seconds: float,
    most_lines: int,
) -> Contention:
    rate = LOAD_X * capacity_texts_per_s / TEXTS_PER_LINE
    alone = open_loop(gateway_url, rate, seconds)
    lines = contention_lines(capacity_texts_per_s, seconds, most_lines)
    file_id = client.upload(batch_file(line_texts(lines, LINE_SEED + 1)))
    batch = client.create(file_id)
    try:
        before = client.until(
            batch["id"],
            lambda b: b["request_counts"]["completed"] > 0 or _final(b),
            START_TIMEOUT_S,
            "for its first lines",
        )
        beside = open_loop(gateway_url, rate, seconds)
        after = client.get(batch["id"])
    finally:
        client.cancel(batch["id"])
    meanwhile = after["request_counts"]["completed"] - before["request_counts"]["completed"]
    throughout = before["status"] == after["status"] == "in_progress"
    return Contention(rate, alone, beside, lines, meanwhile, throughout)


def batches_settings(data_dir: Path) -> Settings:
    return bench_settings(data_dir, {"backend": "onnx"}, {"cache": {"enabled": False}})


def run_batches_bench(data_dir: Path, *, lines: int, seconds: float) -> BatchesResults:
    if lines < 1 or seconds <= 0:
        raise BenchError(f"lines and seconds must be positive, not {lines} and {seconds}")
    settings = batches_settings(data_dir)
    registry = open_registry(settings)
    try:
        registry.seed_demo()
        ensure_default_model(settings, registry)
    finally:
        registry.close()
    most_lines = min(settings.batches.max_lines, settings.batches.max_inputs // TEXTS_PER_LINE)
    if lines > most_lines:
        raise BenchError(
            f"--lines {lines}: at most {most_lines} lines of {TEXTS_PER_LINE} texts fit one "
            "batch (batches.max_lines, batches.max_inputs)"
        )
    with serving(settings) as processes, batch_client(processes.gateway_url) as client:
        measured = throughput(processes.gateway_url, client, lines)
        beside = contention(
            processes.gateway_url, client, measured.sync_texts_per_s, seconds, most_lines
        )
    return BatchesResults(measured, beside, seconds)
