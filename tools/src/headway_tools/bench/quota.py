"""Quotas: the CPU a check costs, and over-admission with several gateways on one Redis.

1. CPU per quota check, in this process: ``LocalQuotaStore.take`` (embedded mode)
   and ``RedisQuotaStore.take`` against a throw-away redis-server on loopback.
2. Over-admission: ``headway up --gateways 4 --redis-url ...`` (zero-cost synthetic
   worker), one tenant offered 4x its quota spread over the 4 gateways by the
   open-loop load generator; admitted texts ÷ (burst + rate x elapsed).

``run_quota_bench`` measures and returns ``QuotaResults``; ``render`` writes them
as the Markdown section ``quota``. The quota stores are imported where they are
measured: rendering needs none of the gateway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.registry.sqlite import Registry
from headway_tools.bench.host import Machine
from headway_tools.bench.served import bench_settings, serving
from headway_tools.bench.stats import markdown_table
from headway_tools.loadgen import LoadResult, RequestClass, Schedule, Step, Workload, run_load
from headway_tools.testing.redis_server import RedisServer

if TYPE_CHECKING:
    from headway.gateway.quota.store import QuotaStore

SECTION = "quota"
KEY = "bench-quota-key"
RATE, BURST = 200.0, 400.0
TEXTS = 4
GATEWAYS = 4
EMBEDDED, REDIS = "embedded (in-process bucket)", "Redis (Lua script, loopback)"
CHECKS = {EMBEDDED: 50_000, REDIS: 5_000}  # quota checks timed, per store


@dataclass(frozen=True, slots=True)
class OverAdmission:
    offered_texts_per_s: float
    seconds: float
    admitted_texts: int
    refused: int

    @property
    def allowance(self) -> float:
        return BURST + RATE * self.seconds

    @property
    def ratio(self) -> float:
        return self.admitted_texts / self.allowance


async def cpu_per_check(store: QuotaStore, checks: int) -> float:
    """CPU µs of this process per take (a huge quota, so every take is granted)."""
    from headway.gateway.quota.store import Quota

    quota = Quota(1, rate=1e9, burst=1e9)
    await store.take(quota, 1)
    started = time.process_time()
    for _ in range(checks):
        await store.take(quota, 1)
    return (time.process_time() - started) / checks * 1e6


def over_admission(data_dir: Path, redis_url: str, seconds: float) -> OverAdmission:
    settings = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": 0}},
        {"quota": {"enabled": True, "heartbeat_s": 0.5}},
    )
    settings = settings.model_copy(
        update={"redis_url": redis_url, "up": settings.up.model_copy(update={"gateways": GATEWAYS})}
    )
    registry = Registry(settings.registry_path)
    registry.seed_demo()
    registry.add_model(synthetic_record(settings.worker.synthetic), (SYNTHETIC_ALIAS,))
    if not any(t.name == "bench-quota" for t in registry.tenants()):
        registry.add_tenant(
            "bench-quota", "interactive", rate_texts_per_s=RATE, burst_texts=BURST, key=KEY
        )
    rps_per_gateway = 4 * RATE / TEXTS / GATEWAYS  # 4x the quota in total
    work = Workload(
        (
            RequestClass(
                "metered", KEY, model=SYNTHETIC_ALIAS, texts=(TEXTS, TEXTS), timeout_ms=2000
            ),
        )
    )
    with serving(settings) as processes:
        urls = processes.gateway_urls

        async def all_gateways() -> list[LoadResult]:
            return await asyncio.gather(
                *(
                    run_load(
                        url,
                        work,
                        Schedule((Step(seconds, rps_per_gateway),), "poisson", seed=i),
                        client_timeout_s=3.0,
                    )
                    for i, url in enumerate(urls)
                )
            )

        results = asyncio.run(all_gateways())
    served = sum(r.report.overall.served for r in results)
    refused = sum(r.report.overall.quota for r in results)
    return OverAdmission(4 * RATE, seconds, served * TEXTS, refused)


@dataclass(frozen=True, slots=True)
class QuotaResults:
    cpu_us_per_check: Mapping[str, float]
    """By quota store, as named in ``CHECKS``."""
    admission: OverAdmission


def run_quota_bench(data_dir: Path, *, seconds: float) -> QuotaResults:
    from headway.gateway.quota.store import LocalQuotaStore

    with RedisServer() as redis:
        costs = {
            EMBEDDED: asyncio.run(cpu_per_check(LocalQuotaStore(), CHECKS[EMBEDDED])),
            REDIS: asyncio.run(_redis_cost(redis.url, CHECKS[REDIS])),
        }
        admission = over_admission(data_dir, redis.url, seconds)
    return QuotaResults(costs, admission)


async def _redis_cost(url: str, checks: int) -> float:
    from headway.gateway.quota.redis_store import RedisQuotaStore

    store = RedisQuotaStore(url)
    try:
        return await cpu_per_check(store, checks)
    finally:
        await store.close()


def render(results: QuotaResults, machine: Machine, command: str, seconds: float) -> str:
    admission = results.admission
    return "\n\n".join(
        [
            "## Quotas: cost of a check, over-admission across gateways",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; redis-server started by the "
            "benchmark on loopback.",
            markdown_table(
                ["quota store", "checks", "CPU µs per check (gateway process)"],
                [
                    [name, f"{CHECKS[name]:,}", f"{us:.1f}"]
                    for name, us in results.cpu_us_per_check.items()
                ],
                "lrr",
            ),
            f"Over-admission: {GATEWAYS} gateways "
            f"(`headway up --gateways {GATEWAYS} --redis-url`), "
            f"one tenant with rate {RATE:g} texts/s and burst {BURST:g}, offered "
            f"{admission.offered_texts_per_s:g} texts/s (4× its rate) in requests of {TEXTS} "
            f"texts spread evenly over the gateways, open-loop, {seconds:g} s.",
            markdown_table(
                [
                    "admitted texts",
                    "allowance (burst + rate × elapsed)",
                    "admitted ÷ allowance",
                    "429 answers",
                ],
                [
                    [
                        f"{admission.admitted_texts:,}",
                        f"{admission.allowance:,.0f}",
                        f"{admission.ratio:.3f}",
                        f"{admission.refused:,}",
                    ]
                ],
                "rrrr",
            ),
        ]
    )
