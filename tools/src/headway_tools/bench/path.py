"""``headway bench path``: the gateway's own CPU per request, in process, without sockets.

The gateway app is driven through ASGI directly, as uvicorn would call it, and its
one replica is a ``MockTransport`` that answers every chunk with a canned result of
the right shape. What is timed is therefore the gateway's Python alone: the edge,
every stage of the request path, JSON in and out, quotas and admission on (as
``headway up`` runs them), for a tenant whose quota is never short, and the heap settled
once started as a served gateway's is (``headway/heap.py``). Each kind of
request runs ``REPEATS`` times for a fifth of ``seconds``, after a warm-up; the
report gives the median CPU µs per request (``time.process_time``) and the range.

The features still to come (usage events, versions and splits, the cache, tracing)
land on this path: this is where their price shows, measured side by side.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from headway import wire
from headway.app.build import build_gateway_app
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.gateway.discovery.static import StaticDiscovery
from headway.gateway.service import GatewayService
from headway.heap import settle_heap
from headway.http.asgi import DISCONNECT_EXTENSION, App, Disconnect, Message
from headway.registry.sqlite import Registry
from headway.settings import GatewaySettings, SyntheticSettings
from headway.transport.base import Reply, UpstreamRequest
from headway.transport.mock import MockTransport
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import markdown_table

SECTION = "path"
REPEATS = 5
WARMUP = 500
BATCH = 200  # requests between clock reads
KEY = "bench-path-key"
REPLICA = "http://replica"
WIDTH = 384


@dataclass(frozen=True, slots=True)
class Case:
    """One kind of request: its route, body and how many chunks the gateway makes of it."""

    name: str
    path: str
    body: bytes
    chunks: int


def cases() -> list[Case]:
    encode = msgspec.json.encode
    sentence = "the quick brown fox jumps over the lazy dog"
    return [
        Case(
            "embeddings, 1 text",
            "/v1/embeddings",
            encode({"model": SYNTHETIC_ALIAS, "input": [sentence]}),
            1,
        ),
        Case(
            "embeddings, 64 texts",
            "/v1/embeddings",
            encode({"model": SYNTHETIC_ALIAS, "input": [f"{sentence} {i}" for i in range(64)]}),
            4,
        ),
        Case(
            "rerank, 8 documents",
            "/v1/rerank",
            encode({"model": SYNTHETIC_ALIAS, "query": sentence, "documents": [sentence] * 8}),
            1,
        ),
    ]


@dataclass(frozen=True, slots=True)
class PathPoint:
    case: Case
    requests: int
    cpu_us: Sequence[float]
    """CPU µs per request of each repeat."""

    @property
    def median_us(self) -> float:
        return statistics.median(self.cpu_us)


@dataclass(frozen=True, slots=True)
class PathResults:
    points: Sequence[PathPoint]


class Replica:
    """Answers ``/readyz`` as a ready worker of ``version`` and every chunk with zeros."""

    def __init__(self, version: str) -> None:
        self.version = version
        self._ready = msgspec.json.encode(
            {"ready": True, "model_version": version, "kind": "embedding", "dimensions": WIDTH}
        )
        self._answers: dict[tuple[str, int], bytes] = {}

    def __call__(self, request: UpstreamRequest) -> Reply:
        if request.path == "/readyz":
            return Reply(200, self._ready, {})
        if request.path == wire.EmbedChunk.path:
            rows, width = len(wire.embed_decoder.decode(request.body).texts), WIDTH
        else:
            rows, width = len(wire.score_decoder.decode(request.body).documents), 1
        answer = self._answers.get((request.path, rows))
        if answer is None:
            values = np.zeros(rows * width, dtype="<f4").tobytes()
            result = wire.ChunkResult(self.version, values, rows, width, rows)
            answer = self._answers[(request.path, rows)] = wire.encode(result)
        return Reply(200, answer, {})


async def call_gateway(app: App, case: Case) -> None:
    """One request through ASGI as headway's own server makes it (``http/guard.py``): with
    the connection's addresses and the disconnect extension, so no watcher task is
    started (here one would never run: nothing in this loop waits on I/O)."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": case.path,
        "scheme": "http",
        "http_version": "1.1",
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 40000),
        "extensions": {DISCONNECT_EXTENSION: Disconnect()},
        "headers": [
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(case.body)).encode()),
        ],
    }
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": case.body, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{case.name}: the gateway answered {sent[0]['status']}: {sent[1]}")


async def _measure(app: App, case: Case, seconds: float) -> PathPoint:
    for _ in range(WARMUP):
        await call_gateway(app, case)
    per_repeat_s = seconds / REPEATS
    cpu_us, total = [], 0
    for _ in range(REPEATS):
        requests = 0
        started_wall, started_cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - started_wall < per_repeat_s:
            for _ in range(BATCH):
                await call_gateway(app, case)
            requests += BATCH
        cpu_us.append((time.process_time() - started_cpu) / requests * 1e6)
        total += requests
    return PathPoint(case, total, cpu_us)


async def _run(registry: Registry, seconds: float) -> PathResults:
    record = synthetic_record(SyntheticSettings(dimensions=WIDTH))
    registry.add_model(record, (SYNTHETIC_ALIAS,))
    service = GatewayService(
        GatewaySettings(health_interval_s=3600, dns_interval_s=3600, registry_refresh_s=3600),
        registry,
        MockTransport(Replica(record.version), keep=False),
        {"embed": StaticDiscovery([REPLICA])},
    )
    app = build_gateway_app(service, (SYNTHETIC_ALIAS,))
    await app.startup()
    await settle_heap()  # as a served gateway does (headway/heap.py)
    try:
        return PathResults([await _measure(app, case, seconds) for case in cases()])
    finally:
        await app.shutdown()


def run_path_bench(data_dir: Path, *, seconds: float) -> PathResults:
    """``data_dir`` is not touched: the gateway reads a registry made for the run."""
    with tempfile.TemporaryDirectory() as scratch:
        registry = Registry(Path(scratch) / "registry.sqlite3")
        registry.add_tenant(
            "bench-path", "interactive", rate_texts_per_s=1e12, burst_texts=1e12, key=KEY
        )
        import uvloop

        return uvloop.run(_run(registry, seconds))


def render(results: PathResults, machine: Machine, command: str, seconds: float) -> str:
    rows = [
        [
            p.case.name,
            str(p.case.chunks),
            f"{p.median_us:,.0f}",
            f"{min(p.cpu_us):,.0f}–{max(p.cpu_us):,.0f}",
            f"{p.requests:,}",
        ]
        for p in results.points
    ]
    return "\n\n".join(
        [
            "## Path: the gateway's own CPU per request",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; Python {machine.python}; "
            f"1-minute load average {machine.load_average:.2f} at start.",
            "The gateway app called through ASGI in one process (no sockets), its one replica a "
            "`MockTransport` answering every chunk at once; quotas and admission on. "
            f"{REPEATS} runs of {seconds / REPEATS:g} s per request kind after {WARMUP} "
            "warm-up requests; CPU time of the process (`time.process_time`) per request.",
            markdown_table(
                ["request", "chunks", "CPU µs/request (median)", "range", "requests"],
                rows,
                "lrrrr",
            ),
        ]
    )
