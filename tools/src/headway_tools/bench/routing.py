"""Routing under failure and scale, on the synthetic backend (the issue's four scenarios).

Every point starts fresh processes as ``headway up`` does (``supervised``):
- a replica SIGKILLed at 60% load, then restarted, with and without retries
  (and with retries but no admission control, which sheds while the two left
  run at 90%): the per-second timeline of served, errors and p95, open-loop;
- saturation throughput with 1, 2, 3 and 4 replicas: served req/s when offered
  3x a guess with admission on (``capacity_rps``), as a ratio to 1 replica;
- one request of 128 texts at a time (closed loop, concurrency 1): p50 on 1
  replica, on 4 with fan-out, and on 4 without (one chunk);
- one replica of 3 answering ``SLOW_X`` times slower (not failing) at 50% of
  the pool's capacity, with and without hedging: p99, the chunks hedged (from
  ``/admin/replicas``) and the model work they added (from the workers' metrics).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from headway.catalog import SYNTHETIC_ALIAS
from headway.quantile import quantile
from headway.settings import Settings
from headway.up.supervisor import Supervisor
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.overload import interactive_only, prepare
from headway_tools.bench.served import bench_settings, gateway_traffic, supervised
from headway_tools.loadgen import LoadResult, Schedule, Step, run_load
from headway_tools.loadgen.corpus import sentences
from headway_tools.loadgen.recorder import Outcome

ADMIN_KEY = "demo-admin-key"
API_KEY = "demo-key-search-app"
CLIENT_TIMEOUT_S = 2.0  # above the workload's 1 s deadline
REPLICA_RPS_GUESS = 70.0  # 2-text requests: 32 texts per 50 + 5 x 32 ms call
KILL_LOAD = 0.6
HEDGE_LOAD = 0.5
SLOW_X = 10.0
HICCUP_SHARE = 0.05
HICCUP_MS = 1000.0
SYNTHETIC_CALL_MS = 50.0
FANOUT_TEXTS = 128
FANOUT_REQUESTS = 30
FANOUT_WARMUP = 3


def settings_for(
    data_dir: Path, replicas: int, routing: Mapping[str, Any] | None = None, **gateway: Any
) -> Settings:
    return bench_settings(
        data_dir,
        {"backend": "synthetic"},
        {"routing": dict(routing or {}), **gateway},
        embed_replicas=replicas,
    )


async def load(supervisor: Supervisor, rps: float, seconds: float) -> LoadResult:
    """Open-loop load on the first gateway: Poisson arrivals of 2-text requests."""
    schedule = Schedule((Step(seconds, rps),), arrivals="poisson", seed=11)
    return await run_load(
        supervisor.gateways[0].url,
        interactive_only("synthetic"),
        schedule,
        client_timeout_s=CLIENT_TIMEOUT_S,
    )


def capacity_rps(
    settings: Settings, guess_rps: float, worker_env: Mapping[str, Mapping[str, str]] | None = None
) -> float:
    """Served req/s in the steady second half of a run offered 3x ``guess_rps``."""
    with supervised(settings, worker_env) as supervisor:
        result = asyncio.run(load(supervisor, 3 * guess_rps, 10.0))
    steady = result.report.timeline[len(result.report.timeline) // 2 :]
    return sum(s.served for s in steady) / sum(s.seconds for s in steady)


@dataclass(frozen=True, slots=True)
class KillRun:
    retries: bool
    admission: bool
    offered_rps: float
    killed_at_s: float
    restarted_at_s: float
    """Seconds from the start of the load (the timeline's second 0)."""
    result: LoadResult

    @property
    def label(self) -> str:
        return f"retries {_on(self.retries)}, admission {_on(self.admission)}"


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def kill_run(
    data_dir: Path, capacity: float, seconds: float, *, retries: bool, admission: bool
) -> KillRun:
    """3 replicas at ``KILL_LOAD``: SIGKILL one at a third of the run, restart it at two."""
    settings = settings_for(data_dir, 3, {"retries": retries}, admission={"enabled": admission})
    rps = KILL_LOAD * capacity
    with supervised(settings) as supervisor:
        victim = next(c for c in supervisor.children if c.name == "embed-worker-0")
        events: dict[str, float] = {}

        async def kill_then_restart() -> None:
            await asyncio.sleep(seconds / 3)
            victim.process.kill()
            events["killed"] = time.perf_counter()
            await asyncio.to_thread(victim.process.wait)
            await asyncio.sleep(seconds / 3)
            if not supervisor.restart(victim):
                raise ServingFailed("the killed replica could not be restarted")
            events["restarted"] = time.perf_counter()

        async def scenario() -> LoadResult:
            result, _ = await asyncio.gather(load(supervisor, rps, seconds), kill_then_restart())
            return result

        result = asyncio.run(scenario())
        ended = time.perf_counter()
    client = result.report.client
    assert client is not None  # run_load always reports its own side
    started = ended - client.wall_s  # the load's second 0, on the same clock
    return KillRun(
        retries,
        admission,
        rps,
        events["killed"] - started,
        events["restarted"] - started,
        result,
    )


@dataclass(frozen=True, slots=True)
class FanOut:
    replicas: int
    chunk_texts: int
    latencies_s: Sequence[float]

    @property
    def p50_s(self) -> float:
        return quantile(self.latencies_s, 0.50)

    @property
    def p95_s(self) -> float:
        return quantile(self.latencies_s, 0.95)


def fan_out(data_dir: Path, replicas: int, chunk_texts: int) -> FanOut:
    """``FANOUT_REQUESTS`` requests of ``FANOUT_TEXTS`` texts, one at a time."""
    corpus = sentences(FANOUT_TEXTS * 4)
    batches = [corpus[i : i + FANOUT_TEXTS] for i in range(0, len(corpus), FANOUT_TEXTS)]
    with supervised(settings_for(data_dir, replicas, chunk_texts=chunk_texts)) as supervisor:
        traffic = gateway_traffic(supervisor.gateways[0].url, batches, SYNTHETIC_ALIAS, API_KEY)
        asyncio.run(traffic.run(concurrency=1, requests=FANOUT_WARMUP))  # a warm pool
        result = asyncio.run(traffic.run(concurrency=1, requests=FANOUT_REQUESTS))
    if result.errors:
        raise ServingFailed(f"fan-out requests failed: {dict(result.errors)}")
    return FanOut(replicas, chunk_texts, result.latencies_s)


class RoutingCounts(msgspec.Struct):
    chunks: int
    retries: int
    hedges: int
    hedges_won: int


@dataclass(frozen=True, slots=True)
class SlowReplica:
    """How the third replica is slow: always (every call), or now and then (hiccups)."""

    name: str
    env: Mapping[str, str]

    @property
    def worker_env(self) -> Mapping[str, Mapping[str, str]]:
        return {"embed-worker-2": self.env}


SLOW_REPLICAS = (
    SlowReplica(
        f"every call {SLOW_X:g}× slower",
        {"HEADWAY_WORKER__SYNTHETIC__CALL_MS": f"{SYNTHETIC_CALL_MS * SLOW_X:g}"},
    ),
    SlowReplica(
        f"{HICCUP_SHARE:.0%} of calls {HICCUP_MS:g} ms slower",
        {
            "HEADWAY_WORKER__SYNTHETIC__HICCUP_SHARE": f"{HICCUP_SHARE:g}",
            "HEADWAY_WORKER__SYNTHETIC__HICCUP_MS": f"{HICCUP_MS:g}",
        },
    ),
)


@dataclass(frozen=True, slots=True)
class HedgeRun:
    slow: SlowReplica
    hedging: bool
    offered_rps: float
    result: LoadResult
    counts: RoutingCounts
    worker_texts: int
    """Texts the workers ran through the model: hedges that ran count, cancelled ones
    dropped from a queue do not."""

    def p99_ms(self) -> float | None:
        """Over every admitted request, a timeout counted at the time it came back (its
        deadline): the tail a client sees, which the served-only p99 would hide."""
        records = self.result.records
        answered = (records.outcome == Outcome.OK) | (records.outcome == Outcome.TIMEOUT)
        latencies_s = records.latency_s[answered]
        return quantile(latencies_s, 0.99) * 1000 if latencies_s.size else None


def hedge_run(
    data_dir: Path, slow: SlowReplica, capacity: float, hedging: bool, seconds: float
) -> HedgeRun:
    routing = {"hedge_pools": ["embed"] if hedging else []}
    rps = HEDGE_LOAD * capacity
    with supervised(settings_for(data_dir, 3, routing), slow.worker_env) as supervisor:
        result = asyncio.run(load(supervisor, rps, seconds))
        gateway = supervisor.gateways[0].url
        workers = [c.url for c in supervisor.children if c not in supervisor.gateways]
        counts, texts = asyncio.run(_counts(gateway, workers))
    return HedgeRun(slow, hedging, rps, result, counts, texts)


async def _counts(gateway_url: str, worker_urls: Sequence[str]) -> tuple[RoutingCounts, int]:
    """The gateway's attempt counters, and the texts all workers ran."""
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway_url + "/admin/replicas", headers=headers) as response:
            admin = msgspec.json.decode(await response.read())
        texts = 0.0
        for url in worker_urls:
            async with session.get(url + "/metrics") as response:
                exposition = await response.text()
            for family in text_string_to_metric_families(exposition):
                if family.name == "headway_worker_texts":
                    texts += sum(sample.value for sample in family.samples)
    return msgspec.convert(admin["routing"]["embed"], RoutingCounts, strict=False), int(texts)


@dataclass(frozen=True, slots=True)
class RoutingResults:
    capacity: Mapping[int, float]
    kills: Sequence[KillRun]
    fan_outs: Sequence[FanOut]
    slow_capacity: Mapping[str, float]
    hedges: Sequence[HedgeRun]


def run_routing_bench(data_dir: Path, *, seconds: float) -> RoutingResults:
    prepare(data_dir, real_model=False)
    capacity = {
        n: capacity_rps(settings_for(data_dir, n), REPLICA_RPS_GUESS * n) for n in (1, 2, 3, 4)
    }
    kills = [
        kill_run(data_dir, capacity[3], seconds, retries=retries, admission=admission)
        for retries, admission in ((True, True), (False, True), (True, False))
    ]
    fan_outs = [
        fan_out(data_dir, replicas, chunk) for replicas, chunk in ((1, 16), (4, 16), (4, 128))
    ]
    slow_capacity = {
        slow.name: capacity_rps(settings_for(data_dir, 3), 3 * REPLICA_RPS_GUESS, slow.worker_env)
        for slow in SLOW_REPLICAS
    }
    hedges = [
        hedge_run(data_dir, slow, slow_capacity[slow.name], hedging, seconds)
        for slow in SLOW_REPLICAS
        for hedging in (False, True)
    ]
    return RoutingResults(capacity, kills, fan_outs, slow_capacity, hedges)
