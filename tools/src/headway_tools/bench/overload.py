"""Overload scenarios, each with and without admission control, open-loop.

Every point starts fresh processes (``supervised``, as ``headway up`` does), measures
the pool's capacity first where needed, then offers a multiple of it with the
open-loop load generator: latency counts from each request's intended send
time, and goodput is what was served within the request's own deadline.

Scenarios (the issue's list):
- overload at 2x, 5x, 10x capacity, synthetic backend, 2 replicas;
- overload at 2x, real model, 1 replica; at 5x and 10x, real model, 2 replicas on the
  machine's 2 cores (admission on: the refusals share the cores with the model);
- overload at 2x and 5x with 1, 3 and 5 gateways (``headway up --gateways N``),
  synthetic backend, 2 replicas, the load spread evenly over the gateways: the
  latency budget is the service's promise, whatever the number of gateways;
- a batch tenant flooding at 3x capacity while an interactive tenant sends 0.5x.

A step 0.5x -> 2x -> 0.5x, timed until goodput settled, was dropped: goodput reached 90%
of its steady level at once with admission on and off (0.00 s both), so it told nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headway.catalog import SYNTHETIC_ALIAS, ensure_default_model, synthetic_record
from headway.registry.sqlite import Registry
from headway.settings import Settings
from headway_tools.bench.host import process_cpu_s
from headway_tools.bench.served import Processes, bench_settings, supervised
from headway_tools.bench.spread import run_spread
from headway_tools.loadgen import LoadResult, RequestClass, Step, Summary, Workload

INTERACTIVE_KEY = "demo-key-search-app"
BATCH_KEY = "demo-key-nightly-index"
DEADLINE_MS = 1000  # each request's X-Timeout-Ms; goodput = served within it
LATENCY_BUDGET_MS = 500  # the admission setting's default, which the stacks keep
BATCH_DEADLINE_MS = 5000
TEXTS = (2, 2)
WORDS = (8, 40)
CAPACITY_PROBE_S = 10.0
GATEWAYS = (1, 3, 5)
GATEWAYS_SCENARIO = "gateways"  # synthetic, 2 replicas; ``Point.gateways`` says how many


@dataclass(frozen=True, slots=True)
class Stack:
    """What a point runs on: backend, replicas, admission on or off, gateways."""

    backend: str
    replicas: int
    admission: bool
    gateways: int = 1

    def settings(self, data_dir: Path) -> Settings:
        settings = bench_settings(
            data_dir,
            {"backend": self.backend},
            {"admission": {"enabled": self.admission}},
            embed_replicas=self.replicas,
        )
        up = settings.up.model_copy(update={"gateways": self.gateways})
        return settings.model_copy(update={"up": up})


@dataclass(frozen=True, slots=True)
class Point:
    """One open-loop run: what was offered, and what came back."""

    scenario: str
    admission: bool
    capacity_rps: float
    offered_x: float
    result: LoadResult
    gateways: int = 1
    cpu_cores: Mapping[str, float] | None = None
    """CPU seconds per second of the run, by role (gateways, workers, client), all
    processes of a role together; measured where the scenario needs it."""

    @property
    def overall(self) -> Summary:
        return self.result.report.overall


def model_name(backend: str) -> str:
    return SYNTHETIC_ALIAS if backend == "synthetic" else "all-MiniLM-L6-v2"


def workload(backend: str, *classes: tuple[str, str, str, float, int]) -> Workload:
    """Classes as (name, key, tier, weight, deadline_ms), all on the stack's model."""
    return Workload(
        tuple(
            RequestClass(
                name=name,
                key=key,
                tier=tier,
                weight=weight,
                model=model_name(backend),
                texts=TEXTS,
                words=WORDS,
                timeout_ms=deadline_ms,
            )
            for name, key, tier, weight, deadline_ms in classes
        ),
        seed=7,
    )


def interactive_only(backend: str) -> Workload:
    return workload(backend, ("interactive", INTERACTIVE_KEY, "interactive", 1.0, DEADLINE_MS))


def load(processes: Processes, work: Workload, steps: Sequence[Step]) -> LoadResult:
    """``steps`` offered to the stack, spread evenly over its gateways."""
    timeout_s = max(c.timeout_ms for c in work.classes) / 1000 + 1.0
    urls = processes.gateway_urls or (processes.gateway_url,)
    return asyncio.run(run_spread(urls, work, steps, seed=11, client_timeout_s=timeout_s))


@contextmanager
def running(stack: Stack, data_dir: Path) -> Iterator[Processes]:
    """The stack's processes; ``pids`` names every one by role (``gateway-0``, ``worker-1``
    ..., ``client``), as ``cpu_by_role`` reads them."""
    with supervised(stack.settings(data_dir)) as supervisor:
        workers = [c for c in supervisor.children if c not in supervisor.gateways]
        pids = {f"gateway-{i}": c.process.pid for i, c in enumerate(supervisor.gateways)}
        pids |= {f"worker-{i}": c.process.pid for i, c in enumerate(workers)}
        yield Processes(
            supervisor.gateways[0].url,
            workers[0].url,
            pids | {"client": os.getpid()},
            tuple(g.url for g in supervisor.gateways),
            supervisor.gateways[0].metrics_url,
        )


def cpu_by_role(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far, all processes of a role (the name before ``-``) together."""
    used: dict[str, float] = {}
    for name, pid in pids.items():
        role = name.split("-")[0]
        used[role] = used.get(role, 0.0) + process_cpu_s(pid)
    return used


def measure_capacity(stack: Stack, data_dir: Path, guess_rps: float) -> float:
    """Requests/s the stack serves when offered far more (admission on): its capacity."""
    with running(Stack(stack.backend, stack.replicas, True), data_dir) as processes:
        result = load(
            processes, interactive_only(stack.backend), [Step(CAPACITY_PROBE_S, 3 * guess_rps)]
        )
    steady = result.report.timeline[len(result.report.timeline) // 2 :]
    return float(np.mean([s.served for s in steady]))


def overload_point(
    scenario: str, stack: Stack, data_dir: Path, capacity: float, multiple: float, seconds: float
) -> Point:
    with running(stack, data_dir) as processes:
        result = load(
            processes, interactive_only(stack.backend), [Step(seconds, multiple * capacity)]
        )
    return Point(scenario, stack.admission, capacity, multiple, result)


def gateways_point(
    stack: Stack, data_dir: Path, capacity: float, multiple: float, seconds: float
) -> Point:
    """An overload point with the CPU each role used: with several gateways on a small
    machine, goodput can fall short for want of CPU rather than of admission."""
    with running(stack, data_dir) as processes:
        before = cpu_by_role(processes.pids)
        result = load(
            processes, interactive_only(stack.backend), [Step(seconds, multiple * capacity)]
        )
        after = cpu_by_role(processes.pids)
    wall_s = result.report.client.wall_s if result.report.client else seconds
    cores = {role: (after[role] - before[role]) / wall_s for role in before}
    return Point(
        GATEWAYS_SCENARIO,
        stack.admission,
        capacity,
        multiple,
        result,
        stack.gateways,
        cores,
    )


def noisy_neighbour_point(stack: Stack, data_dir: Path, capacity: float, seconds: float) -> Point:
    """Batch tenant at 3x capacity, interactive tenant at 0.5x, at the same time."""
    work = workload(
        stack.backend,
        ("interactive", INTERACTIVE_KEY, "interactive", 0.5, DEADLINE_MS),
        ("batch", BATCH_KEY, "batch", 3.0, BATCH_DEADLINE_MS),
    )
    with running(stack, data_dir) as processes:
        result = load(processes, work, [Step(seconds, 3.5 * capacity)])
    return Point("noisy neighbour", stack.admission, capacity, 3.5, result)


def prepare(data_dir: Path, real_model: bool) -> None:
    settings = Stack("synthetic", 2, True).settings(data_dir)
    registry = Registry(settings.registry_path)
    registry.seed_demo()
    registry.add_model(synthetic_record(settings.worker.synthetic), (SYNTHETIC_ALIAS,))
    if real_model:
        ensure_default_model(settings, registry)


@dataclass(frozen=True, slots=True)
class OverloadResults:
    capacity: Mapping[str, float]
    points: Sequence[Point]


def run_overload_bench(data_dir: Path, *, seconds: float, real_model: bool) -> OverloadResults:
    prepare(data_dir, real_model)
    synthetic_on = Stack("synthetic", 2, True)
    synthetic_off = Stack("synthetic", 2, False)
    # 2 replicas x 32 texts per 50 + 5 x 32 ms call, 2 texts per request.
    capacity = {"synthetic": measure_capacity(synthetic_on, data_dir, guess_rps=150)}
    points: list[Point] = []
    for multiple in (2.0, 5.0, 10.0):
        for stack in (synthetic_on, synthetic_off):
            points.append(
                overload_point(
                    "synthetic, 2 replicas",
                    stack,
                    data_dir,
                    capacity["synthetic"],
                    multiple,
                    seconds,
                )
            )
    if real_model:
        onnx_on, onnx_off = Stack("onnx", 1, True), Stack("onnx", 1, False)
        capacity["onnx"] = measure_capacity(onnx_on, data_dir, guess_rps=30)
        for stack in (onnx_on, onnx_off):
            points.append(
                overload_point(
                    "real model, 1 replica", stack, data_dir, capacity["onnx"], 2.0, seconds
                )
            )
        two_replicas = Stack("onnx", 2, True)
        capacity["onnx, 2 replicas"] = measure_capacity(two_replicas, data_dir, guess_rps=60)
        for multiple in (5.0, 10.0):
            points.append(
                overload_point(
                    "real model, 2 replicas",
                    two_replicas,
                    data_dir,
                    capacity["onnx, 2 replicas"],
                    multiple,
                    seconds,
                )
            )
    for gateways in GATEWAYS:
        for multiple in (2.0, 5.0):
            stack = Stack("synthetic", 2, True, gateways)
            points.append(gateways_point(stack, data_dir, capacity["synthetic"], multiple, seconds))
    for stack in (synthetic_on, synthetic_off):
        points.append(noisy_neighbour_point(stack, data_dir, capacity["synthetic"], seconds))
    return OverloadResults(capacity, points)
