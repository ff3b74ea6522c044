"""What a refused request costs the gateway, measured from outside its process.

Two refusals, each from a closed loop of 1-text ``/v1/embeddings`` requests at
``concurrency`` outstanding, CPU read from ``/proc`` around the run and divided by
every answer (all of them refusals; another status fails the measurement):

- **429, quota**: a tenant whose bucket is empty (rate ~0, burst 1, spent by one
  request first) on a stack whose pool is idle.
- **503, pool full**: admission with a static limit of one text, held by one request
  of ``HOLD_TEXTS`` texts that the synthetic worker takes ``HOLD_TEXTS × TEXT_MS`` to
  answer (its warm-up of 8 texts takes a quarter of a second), so every other request
  finds the pool full.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.host import process_cpu_s
from headway_tools.bench.served import (
    API_KEY,
    CLIENT,
    GATEWAY,
    Processes,
    Traffic,
    bench_settings,
    demo_registry,
    gateway_traffic,
    serving,
)
from headway_tools.loadgen import post

EMPTY_TENANT, EMPTY_KEY = "bench-empty-bucket", "bench-key-empty-bucket"
HOLD_TEXTS, TEXT_MS = 1000, 30.0  # the request that keeps the pool full: 30 s of work


@dataclass(frozen=True, slots=True)
class RefusalPoint:
    kind: str
    answers: int
    statuses: Counter[str]
    gateway_us: float
    client_us: float
    seconds: float

    @property
    def per_second(self) -> float:
        return self.answers / self.seconds if self.seconds else 0.0


async def refusal_cost(
    kind: str,
    traffic: Traffic,
    processes: Processes,
    *,
    expect: str,
    concurrency: int,
    seconds: float,
) -> RefusalPoint:
    """A closed-loop run of refusals; every answer must be ``expect`` (e.g. ``status 429``)."""
    await traffic.run(concurrency=concurrency, requests=4 * concurrency)  # warm the path
    pids = {name: processes.pids[name] for name in (GATEWAY, CLIENT)}
    before = {name: process_cpu_s(pid) for name, pid in pids.items()}
    result = await traffic.run(concurrency=concurrency, duration_s=seconds)
    after = {name: process_cpu_s(pid) for name, pid in pids.items()}
    statuses = Counter({reason: n for reason, n in result.errors.items()})
    if result.requests:
        statuses["status 200"] = result.requests
    answers = sum(statuses.values())
    if not answers or any(not reason.startswith(expect) for reason in statuses):
        raise ServingFailed(f"{kind}: expected only {expect} answers, got {dict(statuses)}")
    return RefusalPoint(
        kind,
        answers,
        statuses,
        (after[GATEWAY] - before[GATEWAY]) / answers * 1e6,
        (after[CLIENT] - before[CLIENT]) / answers * 1e6,
        result.elapsed_s,
    )


def measure_refusals(
    data_dir: Path, bodies: Sequence[Sequence[str]], *, concurrency: int, seconds: float
) -> list[RefusalPoint]:
    """The 429 and the 503 points, each on a fresh stack (see the module docstring)."""
    quota_on = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": 0}},
        {"quota": {"enabled": True}},
    )
    registry = demo_registry(quota_on)
    synthetic = synthetic_record(quota_on.worker.synthetic)
    registry.add_model(synthetic, (SYNTHETIC_ALIAS,))
    if registry.snapshot().tenants.get(EMPTY_TENANT) is None:
        registry.add_tenant(
            EMPTY_TENANT, "interactive", rate_texts_per_s=0.001, burst_texts=1, key=EMPTY_KEY
        )
    points = []
    with serving(quota_on) as processes:
        traffic = gateway_traffic(processes.gateway_url, bodies, SYNTHETIC_ALIAS, EMPTY_KEY)
        points.append(
            asyncio.run(
                refusal_cost(
                    "429, quota used up",
                    traffic,
                    processes,
                    expect="status 429",
                    concurrency=concurrency,
                    seconds=seconds,
                )
            )
        )

    full = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": TEXT_MS}},
        {"admission": {"static_limit_texts": 1}},
    )
    held = synthetic_record(full.worker.synthetic)
    registry.add_model(held, ("bench-held",))
    with serving(full) as processes:
        traffic = gateway_traffic(processes.gateway_url, bodies, "bench-held", API_KEY)
        points.append(asyncio.run(_while_held(traffic, processes, concurrency, seconds)))
    return points


async def _while_held(
    traffic: Traffic, processes: Processes, concurrency: int, seconds: float
) -> RefusalPoint:
    """503s measured while one request holds the pool's only text of room."""
    texts = [f"held text {i}" for i in range(HOLD_TEXTS)]
    body = msgspec.json.encode({"model": "bench-held", "input": texts})
    headers = (*traffic.headers, ("X-Timeout-Ms", "60000"))
    holder = asyncio.create_task(post(traffic.url, body, headers=headers, client_timeout_s=90))
    try:
        await _until_outstanding(processes.gateway_metrics_url)
        return await refusal_cost(
            "503, pool full",
            traffic,
            processes,
            expect="status 503",
            concurrency=concurrency,
            seconds=seconds,
        )
    finally:
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await holder


async def _until_outstanding(metrics_url: str) -> None:
    """Until the gateway's /metrics (``metrics_url``: its operations listener) shows the
    holder's text outstanding on the pool."""
    for _ in range(500):
        scrape = await asyncio.to_thread(_text, metrics_url + "/metrics")
        for line in scrape.splitlines():
            if line.startswith("headway_outstanding_texts{") and float(line.split()[-1]) >= 1:
                return
        await asyncio.sleep(0.01)
    raise ServingFailed("503, pool full: the holding request was never admitted")


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())
