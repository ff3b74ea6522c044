"""Embed replicas on one machine: does a second worker process add a core's worth?

Each point starts a fresh stack with ``n`` embed workers and one gateway (admission
off: the path's own capacity), then drives the gateway with the closed loop at
``concurrency`` requests of ``texts`` texts. The gateway's power-of-two-choices
router spreads chunks over the replicas; each worker runs one intra-op thread,
so a worker is one busy core and nothing spins waiting for work. CPU is read for
every worker, the gateway and this process (the client): when the ratio falls
short of ``n``, the cores column says who took the rest.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from headway_tools.bench.served import (
    CLIENT,
    GATEWAY,
    WORKER,
    LoadPoint,
    Model,
    Processes,
    bench_settings,
    supervised,
    throughput,
)

REPLICAS = (1, 2)


def worker_key(index: int) -> str:
    """The ``cpu_s`` key of the ``index``-th embed worker (the first is ``WORKER``)."""
    return WORKER if index == 0 else f"{WORKER}-{index}"


def replica_points(
    data_dir: Path,
    model: Model,
    corpus: Sequence[str],
    *,
    texts: int,
    concurrency: int,
    seconds: float,
) -> list[LoadPoint]:
    """One gateway point per replica count in ``REPLICAS``; ``note`` says the count."""
    points = []
    for count in REPLICAS:
        settings = bench_settings(
            data_dir,
            {"backend": "onnx"},
            {"admission": {"enabled": False}, "cache": {"enabled": False}},
            embed_replicas=count,
        )
        with supervised(settings) as supervisor:
            gateway = supervisor.gateways[0]
            workers = [c for c in supervisor.children if c.name.startswith("embed-worker-")]
            pids = {worker_key(i): w.process.pid for i, w in enumerate(workers)}
            processes = Processes(
                gateway.url,
                workers[0].url,
                {**pids, GATEWAY: gateway.process.pid, CLIENT: os.getpid()},
            )
            (point,) = asyncio.run(
                throughput(
                    processes,
                    model,
                    corpus,
                    paths=(GATEWAY,),
                    batch_sizes=(texts,),
                    concurrency=concurrency,
                    seconds=seconds,
                    note=f"{count} embed replica{'s' if count > 1 else ''}",
                )
            )
            points.append(point)
    return points


def worker_cores(point: LoadPoint) -> float:
    """CPU seconds per wall second of all the point's workers together."""
    keys = [k for k in point.cpu_s if k == WORKER or k.startswith(f"{WORKER}-")]
    return sum(point.cpu_s[k] for k in keys) / point.result.elapsed_s
