"""``headway bench tracing``: what tracing costs the gateway, off, sampled at 1% and at 100%.

Two measures, each of three gateways: tracing off, and on with ``sample_ratio`` 0.01 and
1.0, exporting to a collector in another process (an HTTP server that reads and drops
each post), so the export's encoding and posting count in the gateway's CPU while the
collector's does not. The three run in turns, so that drift of the machine falls on
all alike.

- **Served**: three stacks as ``headway up`` starts them (a gateway process and a
  zero-cost synthetic worker each), driven over HTTP by a closed loop of 1-text requests
  (every text new) at 16 outstanding; the gateway process's CPU per request from
  ``/proc`` and the client's p99. The order of the three rotates every turn and the
  first turn is a warm-up. This is what a gateway spends: the server, its sockets and
  the durable usage write are in the denominator.
- **In process**: the gateway of ``bench path`` (ASGI called directly, a
  ``MockTransport`` replica that answers at once), per request kind; each turn ends
  only once the exporter has posted what the turn made. Without the server and its
  sockets the denominator is smaller, so the same microseconds are a larger share.

Reported: CPU µs per request (median of the turns, and their range) and the p99.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from headway.app.build import build_gateway_app
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.gateway.discovery.static import StaticDiscovery
from headway.gateway.service import GatewayService
from headway.heap import settle_heap
from headway.http.asgi import App
from headway.otlp.exporter import OtlpExporter
from headway.otlp.setup import ProcessTracing
from headway.quantile import quantile
from headway.registry.sqlite import Registry
from headway.settings import (
    GatewaySettings,
    ObservabilitySettings,
    SyntheticSettings,
    TracingSettings,
)
from headway.tracing.spans import Tracer
from headway.transport.mock import MockTransport
from headway_tools.bench.errors import BenchError
from headway_tools.bench.host import Machine
from headway_tools.bench.path import KEY, REPLICA, WIDTH, Case, Replica, call_gateway, cases
from headway_tools.bench.raw import batches_of
from headway_tools.bench.served import (
    API_KEY,
    GATEWAY,
    Processes,
    Traffic,
    bench_settings,
    demo_registry,
    gateway_traffic,
    measure,
    serving,
)
from headway_tools.bench.stats import markdown_table
from headway_tools.loadgen.corpus import sentences

SECTION = "tracing"
TURNS = 9
WARMUP = 300
MODES = (("off", None), ("on, 1% sampled", 0.01), ("on, 100% sampled", 1.0))
ZERO_COST = {"call_ms": 0, "text_ms": 0}

COLLECTOR = """
import http.server, sys
class Drop(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Drop)
print(server.server_port, flush=True)
server.serve_forever()
"""


@dataclass(slots=True)
class ModePoint:
    mode: str
    case: Case
    cpu_us: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    requests: int = 0

    @property
    def median_us(self) -> float:
        return statistics.median(self.cpu_us)

    @property
    def p99_ms(self) -> float:
        return quantile(self.latency_s, 0.99) * 1000


@dataclass(frozen=True, slots=True)
class TracingResults:
    points: Sequence[ModePoint]
    """In process, by request kind and mode."""
    served: Sequence[ModePoint]
    """Served, by mode (``cpu_us``: the gateway process's, per turn)."""
    spans_exported: int


async def _turn(app: App, exporter: OtlpExporter | None, point: ModePoint, seconds: float) -> None:
    clock = time.perf_counter
    started_wall, started_cpu, requests = clock(), time.process_time(), 0
    while clock() - started_wall < seconds:
        before = clock()
        await call_gateway(app, point.case)
        point.latency_s.append(clock() - before)
        requests += 1
        await asyncio.sleep(0)  # a turn of the event loop, as a server has per request
    if exporter is not None:
        await exporter.flush()  # the turn pays for posting what it made
    point.cpu_us.append((time.process_time() - started_cpu) / requests * 1e6)
    point.requests += requests


async def _gateway(registry: Registry, tracing: ProcessTracing) -> App:
    record = synthetic_record(SyntheticSettings(dimensions=WIDTH))
    service = GatewayService(
        GatewaySettings(health_interval_s=3600, dns_interval_s=3600, registry_refresh_s=3600),
        registry,
        MockTransport(Replica(record.version), keep=False),
        {"embed": StaticDiscovery([REPLICA])},
    )
    app = build_gateway_app(service, (SYNTHETIC_ALIAS,), tracing=tracing)
    await app.startup()
    await settle_heap()  # as a served gateway does (headway/heap.py)
    return app


async def _run(registry: Registry, endpoint: str, seconds: float) -> _InProcess:
    registry.add_model(synthetic_record(SyntheticSettings(dimensions=WIDTH)), (SYNTHETIC_ALIAS,))
    built: list[tuple[str, App, OtlpExporter | None]] = []
    for mode, ratio in MODES:
        exporter = None if ratio is None else OtlpExporter(endpoint, {"service.name": "bench"})
        tracing = ProcessTracing(Tracer(exporter, sample_ratio=ratio or 0.0), exporter)
        built.append((mode, await _gateway(registry, tracing), exporter))
    points: list[ModePoint] = []
    try:
        for case in [c for c in cases() if c.path == "/v1/embeddings"]:
            here = {mode: ModePoint(mode, case) for mode, _, _ in built}
            for _, app, _ in built:
                for _ in range(WARMUP):
                    await call_gateway(app, case)
            for turn in range(TURNS):
                for mode, app, exporter in built[turn % len(built) :] + built[: turn % len(built)]:
                    await _turn(app, exporter, here[mode], seconds / (2 * TURNS * len(MODES)))
            points += here.values()
    finally:
        for _, app, _ in built:
            await app.shutdown()
    exported = sum(exporter.exported for _, _, exporter in built if exporter is not None)
    return _InProcess(points, exported)


@dataclass(frozen=True, slots=True)
class _InProcess:
    points: list[ModePoint]
    spans_exported: int


def run_tracing_bench(*, seconds: float) -> TracingResults:
    """``seconds`` of in-process turns, then as many of served ones."""
    collector = subprocess.Popen(
        [sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True
    )
    try:
        assert collector.stdout is not None
        line = collector.stdout.readline()
        if not line.strip().isdigit():
            raise BenchError("the benchmark's trace collector did not start")
        endpoint = f"http://127.0.0.1:{int(line)}/v1/traces"
        with tempfile.TemporaryDirectory() as scratch:
            registry = Registry(Path(scratch) / "registry.sqlite3")
            registry.add_tenant(
                "bench-tracing", "interactive", rate_texts_per_s=1e12, burst_texts=1e12, key=KEY
            )
            in_process = uvloop.run(_run(registry, endpoint, seconds))
        served = _served(endpoint, seconds)
    finally:
        collector.kill()
        collector.wait()
    return TracingResults(in_process.points, served, in_process.spans_exported)


SERVED_TURNS = 9  # the first of them a warm-up
SERVED_CONCURRENCY = 16


def _served(endpoint: str, seconds: float) -> list[ModePoint]:
    """Three stacks, one per mode, measured in rotating turns (see the module docstring)."""
    case = Case("served, 1 text", "/v1/embeddings", b"", 1)
    corpus = sentences(600_000, seed=11)
    share = len(corpus) // len(MODES)
    with ExitStack() as stacks:
        running: list[tuple[ModePoint, Processes, Traffic]] = []
        for n, (mode, ratio) in enumerate(MODES):
            data_dir = Path(stacks.enter_context(tempfile.TemporaryDirectory()))
            settings = bench_settings(data_dir, {"backend": "synthetic", "synthetic": ZERO_COST})
            if ratio is not None:
                tracing = TracingSettings(otlp_endpoint=endpoint, sample_ratio=ratio)
                settings = settings.model_copy(
                    update={"observability": ObservabilitySettings(tracing=tracing)}
                )
            demo_registry(settings).add_model(
                synthetic_record(settings.worker.synthetic), (SYNTHETIC_ALIAS,)
            )
            processes = stacks.enter_context(serving(settings))
            texts = batches_of(corpus[n * share : (n + 1) * share], 1)  # every text new
            traffic = gateway_traffic(processes.gateway_url, texts, SYNTHETIC_ALIAS, API_KEY)
            running.append((ModePoint(mode, case), processes, traffic))

        async def turns() -> None:
            for turn in range(SERVED_TURNS):
                order = running[turn % len(running) :] + running[: turn % len(running)]
                for point, processes, traffic in order:
                    measured = await measure(
                        traffic,
                        processes,
                        path=GATEWAY,
                        texts_per_request=1,
                        concurrency=SERVED_CONCURRENCY,
                        warmup=0,
                        duration_s=seconds / (SERVED_TURNS * len(MODES)),
                    )
                    if turn == 0:
                        continue  # warm-up
                    point.cpu_us.append(measured.cpu_us_per_request(GATEWAY))
                    point.latency_s.extend(measured.result.latencies_s)
                    point.requests += measured.result.requests

        asyncio.run(turns())
    return [point for point, _, _ in running]


def render(results: TracingResults, machine: Machine, command: str, seconds: float) -> str:
    served = _rows({"served, 1 text": list(results.served)})
    by_case: dict[str, list[ModePoint]] = {}
    for point in results.points:
        by_case.setdefault(point.case.name, []).append(point)
    headers = ["request", "tracing", "CPU µs/request", "range", "vs off", "p99 ms", "requests"]
    return "\n\n".join(
        [
            "## Tracing: what spans cost the gateway",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; Python {machine.python}; "
            f"1-minute load average {machine.load_average:.2f} at start.",
            "Three gateways: tracing off, on with 1% and with 100% of traces sampled, "
            "exporting OTLP/JSON to a collector in another process, measured in turns. A "
            f"1-text request makes 6 spans on the gateway (its SERVER span, authenticate, "
            "quota, admit, the chunk attempt, the usage event; a worker's 5 are the worker's "
            f"own CPU). {results.spans_exported:,} spans exported in process. *vs off*: "
            "the median over turns of each turn's CPU against tracing off's in the same turn "
            "(the modes of a turn run back to back, in an order that rotates each turn).",
            "**Served**: three stacks as `headway up` runs them (gateway process, zero-cost "
            f"synthetic worker), a closed loop of 1-text requests at {SERVED_CONCURRENCY} "
            f"outstanding, every text new; {SERVED_TURNS - 1} turns each in rotating order "
            "after a warm-up turn. The gateway process's CPU per request (from /proc: the "
            "server, its sockets, the durable usage write and the export included) and the "
            "client's p99.",
            markdown_table(headers, served, "llrrrrr"),
            "**In process**: the gateway of `bench path` (ASGI called directly, a replica "
            f"answering at once), {TURNS} turns each per request kind after {WARMUP} warm-up "
            "requests; each turn ended once its spans were posted. Without the server and its "
            "sockets the denominator is smaller, so the same microseconds are a larger share.",
            markdown_table(headers, _rows(by_case), "llrrrrr"),
        ]
    )


def _rows(by_case: dict[str, list[ModePoint]]) -> list[list[str]]:
    rows = []
    for name, points in by_case.items():
        off = points[0]
        for point in points:
            rows.append(
                [
                    name,
                    point.mode,
                    f"{point.median_us:,.0f}",
                    f"{min(point.cpu_us):,.0f}–{max(point.cpu_us):,.0f}",
                    f"{paired_change(point.cpu_us, off.cpu_us):+.1%}",
                    f"{point.p99_ms:.3f}",
                    f"{point.requests:,}",
                ]
            )
    return rows


def paired_change(cpu_us: Sequence[float], off_us: Sequence[float]) -> float:
    """The median over turns of this mode's CPU against tracing off's in the same turn,
    less 1: a turn's modes ran back to back, so the machine's drift cancels within it."""
    return statistics.median(mode / off for mode, off in zip(cpu_us, off_us, strict=True)) - 1
