"""The serving path under load: real worker and gateway processes, driven over HTTP.

``serving`` starts one embed worker and one gateway with ``Supervisor``
exactly as ``headway up`` does (the gateway on an ephemeral port: the
supervisor binds the sockets itself and reads the port back), and stops
them whatever happens. Points are measured with the load generator's closed
loop (``headway_tools.loadgen.run_closed_loop``); for each one the CPU seconds of
the worker, the gateway and this process (the client) are read from ``/proc``
before and after, which shows who was busy when throughput falls short of the
raw model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from headway import wire
from headway.registry.keys import key_digest
from headway.registry.sqlite import Registry
from headway.settings import EdgeLimits, Settings, load_settings
from headway.up.supervisor import Supervisor, with_executor_token, write_run_config
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.host import process_cpu_s
from headway_tools.bench.raw import batches_of
from headway_tools.bench.stats import cpu_us_per_request, per_second
from headway_tools.loadgen import Body, ClosedLoopResult, RequestFailed, post, run_closed_loop
from headway_tools.loadgen.recorder import error_reason

API_KEY = "demo-key-search-app"  # a demo tenant's key: run `registry.seed_demo()` first
WORKER, GATEWAY, CLIENT = "worker", "gateway", "client"
CLIENT_TIMEOUT_S = 120.0  # a request not answered by then counts as a timeout


def demo_registry(settings: Settings) -> Registry:
    """The data dir's embedded registry with the demo tenants, whose key the benchmarks use."""
    registry = Registry(settings.registry_path)
    registry.seed_demo()
    if key_digest(API_KEY) not in registry.snapshot().principals:
        raise ServingFailed(
            f"the registry in {settings.data_dir} has tenants but not the demo key "
            f"{API_KEY!r}, which the benchmark uses; point --data-dir at a fresh directory"
        )
    return registry


@dataclass(frozen=True, slots=True)
class Model:
    """What the processes serve: the alias clients name, the version, the row width."""

    name: str
    version: str
    dimensions: int


@dataclass(frozen=True, slots=True)
class Processes:
    """Where the worker and gateway listen; ``pids`` includes this process as the client."""

    gateway_url: str
    worker_url: str
    pids: Mapping[str, int]
    gateway_urls: tuple[str, ...] = ()
    gateway_metrics_url: str = ""
    """The first gateway's operations listener, where its /metrics is ("": not started)."""


def bench_settings(
    data_dir: Path,
    worker: Mapping[str, Any],
    gateway: Mapping[str, Any] | None = None,
    *,
    embed_replicas: int = 1,
) -> Settings:
    """Settings for a benchmark stack: quiet logs, an ephemeral gateway port, no rerank pool,
    no tenant quotas (the load comes from one demo tenant far above its quota), and no
    per-client connection cap below the process's (the load comes from one address)."""
    one_client = {"max_connections_per_client": EdgeLimits().max_connections}
    return load_settings(
        flags={
            "data_dir": str(data_dir),
            "log_level": "warning",
            "gateway": {
                "port": 0,
                "quota": {"enabled": False},
                "edge": one_client,
                **(gateway or {}),
            },
            "worker": dict(worker),
            "up": {"embed_replicas": embed_replicas, "rerank_replicas": 0},
        }
    )


@contextmanager
def supervised(
    settings: Settings, worker_env: Mapping[str, Mapping[str, str]] | None = None
) -> Iterator[Supervisor]:
    """Workers and gateways as ``headway up`` starts them, ready; stopped on the way out."""
    settings = with_executor_token(settings)
    config = write_run_config(settings)
    supervisor = Supervisor(settings, config, worker_env)
    try:
        gateway = supervisor.start()
        if not supervisor.wait_ready(gateway):
            states = [f"{c.name} {_state(c.process.poll())}" for c in supervisor.children]
            raise ServingFailed(
                f"gateway and worker not ready within {settings.up.ready_timeout_s:.0f}s "
                f"({', '.join(states)})"
            )
        yield supervisor
    finally:
        supervisor.stop()
        config.unlink(missing_ok=True)


@contextmanager
def serving(settings: Settings) -> Iterator[Processes]:
    """One worker and one gateway (or more of each), ready; all stopped on the way out."""
    with supervised(settings) as supervisor:
        gateway = supervisor.gateways[0]
        worker = next(child for child in supervisor.children if child not in supervisor.gateways)
        yield Processes(
            gateway.url,
            worker.url,
            {
                WORKER: worker.process.pid,
                GATEWAY: gateway.process.pid,
                CLIENT: os.getpid(),
            },
            tuple(g.url for g in supervisor.gateways),
            gateway.metrics_url,
        )


def _state(returncode: int | None) -> str:
    return "running" if returncode is None else f"exited with {returncode}"


@dataclass(frozen=True, slots=True)
class Traffic:
    """What a closed-loop run sends: ``bodies`` POSTed round-robin to ``url`` with ``headers``."""

    url: str
    headers: tuple[tuple[str, str], ...]
    bodies: Sequence[Body]

    async def run(
        self, *, concurrency: int, duration_s: float | None = None, requests: int | None = None
    ) -> ClosedLoopResult:
        return await run_closed_loop(
            self.url,
            self.bodies,
            headers=self.headers,
            concurrency=concurrency,
            duration_s=duration_s,
            requests=requests,
            client_timeout_s=CLIENT_TIMEOUT_S,
        )


def worker_traffic(
    worker_url: str,
    batches: Sequence[Sequence[str]],
    model_version: str,
    timeout_ms: float = 60_000,
) -> Traffic:
    """Chunks for a worker's ``/internal/embed``, as the gateway would send them."""
    bodies = [
        Body(
            wire.encode(
                wire.EmbedChunk(
                    f"bench-{i}", list(texts), timeout_ms, wire.Priority.INTERACTIVE, model_version
                )
            ),
            len(texts),
        )
        for i, texts in enumerate(batches)
    ]
    return Traffic(
        worker_url + wire.EmbedChunk.path, (("Content-Type", wire.CONTENT_TYPE),), bodies
    )


def gateway_traffic(
    gateway_url: str, batches: Sequence[Sequence[str]], model: str, api_key: str
) -> Traffic:
    """OpenAI-style ``/v1/embeddings`` bodies (float encoding, the API's default)."""
    encode = msgspec.json.Encoder().encode
    bodies = [Body(encode({"model": model, "input": list(texts)}), len(texts)) for texts in batches]
    headers = (("Content-Type", "application/json"), ("Authorization", f"Bearer {api_key}"))
    return Traffic(gateway_url + "/v1/embeddings", headers, bodies)


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One closed-loop run and the CPU each process spent during it."""

    path: str
    texts_per_request: int
    concurrency: int
    result: ClosedLoopResult
    cpu_s: Mapping[str, float]
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.path}, {self.note}" if self.note else self.path

    @property
    def sentences_per_s(self) -> float:
        return per_second(self.result.texts, self.result.elapsed_s)

    @property
    def requests_per_s(self) -> float:
        return per_second(self.result.requests, self.result.elapsed_s)

    def cores(self, process: str) -> float:
        """CPU seconds per wall-clock second: 1.0 is one core kept busy."""
        return self.cpu_s[process] / self.result.elapsed_s

    def cpu_us_per_request(self, process: str) -> float:
        return cpu_us_per_request(self.cpu_s[process], self.result.requests)


def _traffic(
    processes: Processes, path: str, batches: Sequence[Sequence[str]], model: Model
) -> Traffic:
    """Requests of ``batches`` on ``path``: straight to the worker, or through the gateway."""
    if path == WORKER:
        return worker_traffic(processes.worker_url, batches, model.version)
    return gateway_traffic(processes.gateway_url, batches, model.name, API_KEY)


async def _check(traffic: Traffic, path: str, dimensions: int) -> None:
    """One request, its answer decoded: the right number of rows of the right width."""
    first = traffic.bodies[0]
    try:
        response = await post(
            traffic.url, first.content, headers=traffic.headers, client_timeout_s=CLIENT_TIMEOUT_S
        )
    except RequestFailed as exc:
        raise ServingFailed(f"{path}: first request failed: {exc}") from exc
    if response.status != 200:
        raise ServingFailed(f"{path}: first request failed: {error_reason(response)}")
    try:
        if path == WORKER:
            result = wire.result_decoder.decode(response.body)
            shape = (result.rows, result.dimensions)
        else:
            rows = msgspec.json.decode(response.body)["data"]
            shape = (len(rows), len(rows[0]["embedding"]) if rows else 0)
    except (msgspec.DecodeError, KeyError, TypeError, IndexError) as exc:
        raise ServingFailed(f"{path}: malformed answer: {exc}") from exc
    if shape != (first.texts, dimensions):
        raise ServingFailed(f"{path}: expected {first.texts}x{dimensions} values, got {shape}")


async def measure(
    traffic: Traffic,
    processes: Processes,
    *,
    path: str,
    texts_per_request: int,
    concurrency: int,
    warmup: int,
    duration_s: float | None = None,
    requests: int | None = None,
    note: str = "",
) -> LoadPoint:
    """``warmup`` requests unmeasured, then one closed-loop run with CPU read around it."""
    await traffic.run(concurrency=concurrency, requests=warmup)
    before = {name: process_cpu_s(pid) for name, pid in processes.pids.items()}
    result = await traffic.run(concurrency=concurrency, duration_s=duration_s, requests=requests)
    after = {name: process_cpu_s(pid) for name, pid in processes.pids.items()}
    cpu_s = {name: after[name] - before[name] for name in before}
    return LoadPoint(path, texts_per_request, concurrency, result, cpu_s, note)


async def throughput(
    processes: Processes,
    model: Model,
    corpus: Sequence[str],
    *,
    paths: Sequence[str],
    batch_sizes: Sequence[int],
    concurrency: int,
    seconds: float,
    note: str = "",
) -> list[LoadPoint]:
    """Sentences per second on each path (``WORKER``: straight to it; ``GATEWAY``)."""
    points = []
    for path in paths:
        for batch in batch_sizes:
            traffic = _traffic(processes, path, batches_of(corpus, batch), model)
            await _check(traffic, path, model.dimensions)
            point = await measure(
                traffic,
                processes,
                path=path,
                texts_per_request=batch,
                concurrency=concurrency,
                warmup=concurrency,  # the worker is already warm; this warms the path
                duration_s=seconds,
                note=note,
            )
            points.append(point)
    return points


@dataclass(frozen=True, slots=True)
class Overhead:
    """Per path (worker, gateway): latency one request at a time, and CPU under load."""

    latency: Mapping[str, LoadPoint]
    cpu: Mapping[str, LoadPoint]


async def overhead(
    processes: Processes,
    model: Model,
    corpus: Sequence[str],
    *,
    latency_requests: int,
    cpu_concurrency: int,
    seconds: float,
) -> Overhead:
    """1-text requests to a zero-cost model: what is left is the cost of serving them."""
    latency: dict[str, LoadPoint] = {}
    cpu: dict[str, LoadPoint] = {}
    for path in (WORKER, GATEWAY):
        traffic = _traffic(processes, path, batches_of(corpus, 1), model)
        await _check(traffic, path, model.dimensions)
        latency[path] = await measure(
            traffic,
            processes,
            path=path,
            texts_per_request=1,
            concurrency=1,
            warmup=50,
            requests=latency_requests,
        )
        cpu[path] = await measure(
            traffic,
            processes,
            path=path,
            texts_per_request=1,
            concurrency=cpu_concurrency,
            warmup=2 * cpu_concurrency,
            duration_s=seconds,
        )
    return Overhead(latency, cpu)
