"""``headway bench isolation``: a victim tenant's figures alone and beside each attack.

One system as ``headway up`` starts it (two workers of the synthetic model, whose cost
is spent waiting, as an accelerator's would be: the figures are the gateway's and the
executor's doing, not two CPU cores shared with the attacker's client), a gateway and
the batch executor, quotas, admission and the results cache on as shipped. Two tenants:
``victim`` (interactive, a quota far above its load) and ``mallory`` (interactive, the
default quota, so a burst of 400 texts).

The victim's run: one batch of ``BATCH_LINES`` lines created, and open-loop Poisson
requests of ``TEXTS_PER_REQUEST`` texts at ``LOAD_X`` of the capacity measured first,
for the window; figures: the interactive p95, the share answered within the deadline,
and the seconds from the batch's creation until it read ``completed`` (None: not within
``BATCH_TIMEOUT_S``). Each attack (``bench/attacks.py``) runs in a process of its own
(its client's CPU and event loop kept away from the victim's) and starts
``HEAD_START_S`` before the victim, so what it queues is queued first. Between runs
the attacker's unfinished batches are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import httpx
import msgspec

from headway.catalog import SYNTHETIC_ALIAS, synthetic_aliases, synthetic_record
from headway.registry.model import Actor
from headway.registry.open import open_registry
from headway.settings import RedisSettings, Settings
from headway_tools.bench.attacks import ATTACKS, Outcome, Target
from headway_tools.bench.errors import BenchError, ServingFailed
from headway_tools.bench.served import bench_settings, gateway_traffic, serving
from headway_tools.loadgen import RequestClass, Schedule, Step, Summary, Workload, run_load
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.redis_server import RedisServer

VICTIM, ATTACKER = "victim", "mallory"
MODEL = SYNTHETIC_ALIAS
SYNTHETIC = {"call_ms": 50.0, "text_ms": 5.0}
REPLICAS = 2
SHARED_GATEWAYS = 2
"""In the shared mode the victim calls the first gateway and the attacker the second."""
TEXTS_PER_REQUEST = 4
LINE_TEXTS = 2
BATCH_LINES = 1000
LOAD_X = 0.5
DEADLINE_MS = 1000
WINDOW_S = 15.0
HEAD_START_S = 3.0
BATCH_TIMEOUT_S = 180.0
ATTACK_TIMEOUT_S = 240.0
PROBE_TEXTS = 40
ARRIVAL_SEED = 25
P95_GOAL = 0.10
DEADLINE_SHARE_GOAL = 0.10
BATCH_GOAL = 1.5
SETUP = Actor("bench:isolation")


@dataclass(frozen=True, slots=True)
class VictimFigures:
    interactive: Summary
    batch_s: float | None
    """Creation to ``completed``; None: not completed within ``BATCH_TIMEOUT_S``."""

    @property
    def p95_ms(self) -> float | None:
        return self.interactive.latency_p95_ms

    @property
    def in_deadline(self) -> float:
        offered = self.interactive.offered
        return self.interactive.goodput / offered if offered else 0.0


@dataclass(frozen=True, slots=True)
class AttackRun:
    attacks: tuple[str, ...]
    outcomes: tuple[Outcome, ...]
    victim: VictimFigures


@dataclass(frozen=True, slots=True)
class IsolationResults:
    capacity_texts_per_s: float
    rate_rps: float
    alone: VictimFigures
    runs: tuple[AttackRun, ...]
    seconds: float
    shared: bool = False
    """On Redis, Postgres and NATS with two gateways (the attacker on the second)."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The worst of several runs of the victim alone (``worst_of``): on a small machine one
    quiet run's p95 moves from the next by as much as a goal's band."""

    p95_ms: float | None
    in_deadline: float
    batch_s: float | None


def worst_of(runs: Sequence[VictimFigures]) -> Baseline:
    p95s = [run.p95_ms for run in runs if run.p95_ms is not None]
    batches = [run.batch_s for run in runs if run.batch_s is not None]
    return Baseline(
        max(p95s) if p95s else None,
        min(run.in_deadline for run in runs),
        max(batches) if len(batches) == len(runs) else None,
    )


def within_goals(alone: VictimFigures | Baseline, beside: VictimFigures) -> list[str]:
    """What the victim lost beside an attack beyond the issue's goals (empty: nothing)."""
    missed = []
    if (
        alone.p95_ms is not None
        and beside.p95_ms is not None
        and beside.p95_ms > alone.p95_ms * (1 + P95_GOAL)
    ):
        missed.append(f"p95 {beside.p95_ms:.0f} ms vs {alone.p95_ms:.0f} ms alone")
    if beside.in_deadline < alone.in_deadline * (1 - DEADLINE_SHARE_GOAL):
        missed.append(f"in deadline {beside.in_deadline:.1%} vs {alone.in_deadline:.1%} alone")
    if alone.batch_s is not None and (
        beside.batch_s is None or beside.batch_s > alone.batch_s * BATCH_GOAL
    ):
        took = "never" if beside.batch_s is None else f"{beside.batch_s:.1f} s"
        missed.append(f"batch {took} vs {alone.batch_s:.1f} s alone")
    return missed


def isolation_settings(data_dir: Path, shared: Mapping[str, object] | None = None) -> Settings:
    """As ``up`` ships, but synthetic workers and the bench's quiet, one-address defaults;
    quotas back on (``bench_settings`` turns them off): the attacker must meet its own.
    ``shared``: the Redis, Postgres and NATS settings of the shared mode, two gateways on
    them."""
    settings = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": SYNTHETIC},
        {"quota": {"enabled": True}},
        embed_replicas=REPLICAS,
    )
    if shared is None:
        return settings
    up = settings.up.model_copy(update={"gateways": SHARED_GATEWAYS})
    urls = dict(shared)
    streams = settings.streams.model_copy(  # where start-up reads NATS's fsync setting
        update={"monitor_urls": urls.pop("nats_monitor_url", None)}
    )
    return settings.model_copy(update={**urls, "up": up, "streams": streams})


@contextmanager
def shared_services() -> Iterator[dict[str, object]]:
    """Throw-away Redis (quotas, noeviction; the cache, allkeys-lru), Postgres and NATS
    JetStream servers: the shared mode's, as settings (``redis_url``, ``redis``,
    ``postgres_url``, ``nats_url``; ``nats_monitor_url`` becomes ``streams.monitor_urls``)."""
    with (
        RedisServer(maxmemory_policy="noeviction") as redis,
        RedisServer(maxmemory="256mb", maxmemory_policy="allkeys-lru") as cache_redis,
        PostgresServer() as postgres,
        NatsServer() as nats,
    ):
        postgres.psql("CREATE DATABASE isolation")
        yield {
            "redis_url": redis.url,
            "redis": RedisSettings(cache_url=cache_redis.url),
            "postgres_url": postgres.url_of("isolation"),
            "nats_url": nats.url,
            "nats_monitor_url": nats.monitor_url,
        }


def stall_allowance_s(settings: Settings) -> float:
    """How long a stalled body may hold its connection before the probe calls it held open:
    the edge's body timeout and a margin (the 9 bytes it sent buy it nothing at 500 B/s)."""
    return settings.gateway.edge.body_timeout_s + 10.0


def prepare(settings: Settings) -> tuple[str, str, int]:
    """The two tenants and the synthetic model in the registry; the victim's key, the
    attacker's key and burst."""
    registry = open_registry(settings)
    try:
        synthetic = settings.worker.synthetic
        registry.add_model(synthetic_record(synthetic), synthetic_aliases(synthetic), actor=SETUP)
        known = {tenant.name for tenant in registry.tenants()}
        if VICTIM in known or ATTACKER in known:
            raise BenchError(f"{settings.data_dir} has run this bench before: use a fresh one")
        _, victim_key = registry.add_tenant(
            VICTIM, "interactive", actor=SETUP, rate_texts_per_s=1e6, burst_texts=1e6
        )
        attacker, attacker_key = registry.add_tenant(ATTACKER, "interactive", actor=SETUP)
    finally:
        registry.close()
    return victim_key, attacker_key, int(attacker.burst_texts)


def victim_workload(key: str, seed: int) -> Workload:
    victim = RequestClass(
        "victim",
        key,
        model=MODEL,
        texts=(TEXTS_PER_REQUEST, TEXTS_PER_REQUEST),
        words=(8, 40),
        timeout_ms=DEADLINE_MS,
    )
    return Workload((victim,), seed=seed)


def batch_input(lines: int, run: int) -> bytes:
    """The victim's batch: every text new (one a cache knew would cost nothing)."""
    encode = msgspec.json.Encoder().encode
    return b"".join(
        encode(
            {
                "custom_id": f"v-{n}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {
                    "model": MODEL,
                    "input": [f"victim run {run} line {n} text {i}" for i in range(LINE_TEXTS)],
                },
            }
        )
        + b"\n"
        for n in range(lines)
    )


async def capacity(url: str, key: str) -> float:
    """Texts per second the pool serves to closed-loop clients at saturation, every text new
    (a repeated one would come from the cache)."""
    batches = [
        [f"capacity probe {n} text {i}" for i in range(TEXTS_PER_REQUEST)] for n in range(8192)
    ]
    traffic = gateway_traffic(url, batches, MODEL, key)
    await traffic.run(concurrency=32, duration_s=1.0)  # warm
    result = await traffic.run(concurrency=32, duration_s=4.0)
    if not result.texts:
        raise ServingFailed(f"the capacity probe served nothing: {dict(result.errors)}")
    return result.texts / result.elapsed_s


async def victim_run(url: str, key: str, rate_rps: float, seed: int) -> VictimFigures:
    """The victim's batch and its interactive load, together; their figures."""
    auth = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as client:
        uploaded = await client.post(
            "/v1/files",
            data={"purpose": "batch"},
            files={"file": ("victim.jsonl", batch_input(BATCH_LINES, seed), "application/jsonl")},
        )
        if uploaded.status_code != 200:
            raise ServingFailed(f"the victim's upload: {uploaded.status_code} {uploaded.text}")
        body = {
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/embeddings",
            "completion_window": "24h",
        }
        started = time.perf_counter()
        created = await client.post("/v1/batches", json=body)
        if created.status_code != 200:
            raise ServingFailed(f"the victim's batch: {created.status_code} {created.text}")
        batch_id = created.json()["id"]
        schedule = Schedule((Step(WINDOW_S, rate_rps),), arrivals="poisson", seed=seed)
        load = run_load(
            url, victim_workload(key, seed), schedule, client_timeout_s=DEADLINE_MS / 1000 + 1.0
        )
        interactive = (await load).report.overall
        batch_s = None
        while time.perf_counter() - started < BATCH_TIMEOUT_S:
            status = (await client.get(f"/v1/batches/{batch_id}")).json()["status"]
            if status == "completed":
                batch_s = time.perf_counter() - started
                break
            if status in ("failed", "expired", "cancelled"):
                break
            await asyncio.sleep(0.1)
        await client.post(f"/v1/batches/{batch_id}/cancel")
    return VictimFigures(interactive, batch_s)


def attack_in_process(target: Target, names: Sequence[str]) -> list[Outcome]:
    """Run the named attacks at once, in this (separate) process."""

    async def everything() -> list[Outcome]:
        return list(await asyncio.gather(*(ATTACKS[name](target) for name in names)))

    return asyncio.run(everything())


async def attacked_run(
    url: str,
    victim_key: str,
    target: Target,
    names: Sequence[str],
    rate_rps: float,
    seed: int,
    pool: ProcessPoolExecutor,
) -> AttackRun:
    loop = asyncio.get_running_loop()
    attack = loop.run_in_executor(pool, attack_in_process, target, tuple(names))
    await asyncio.sleep(HEAD_START_S)
    victim = await victim_run(url, victim_key, rate_rps, seed)
    outcomes = await asyncio.wait_for(attack, ATTACK_TIMEOUT_S)
    await cancel_unfinished(url, target.key)
    return AttackRun(tuple(names), tuple(outcomes), victim)


async def cancel_unfinished(url: str, key: str) -> None:
    """The attacker's batches still running, cancelled and waited for."""
    auth = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as client:
        listed = (await client.get("/v1/batches", params={"limit": 100})).json()
        running = [b["id"] for b in listed.get("data", []) if b["status"] not in _FINAL]
        for batch_id in running:
            await client.post(f"/v1/batches/{batch_id}/cancel")
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while running and time.monotonic() < deadline:
            running = [
                batch_id
                for batch_id in running
                if (await client.get(f"/v1/batches/{batch_id}")).json()["status"] not in _FINAL
            ]
            await asyncio.sleep(0.2)


_FINAL = frozenset({"completed", "failed", "expired", "cancelled"})


async def probe_texts(url: str, key: str, run: int) -> list[str]:
    """Texts the victim embeds before run ``run``'s attacks: what its cache probe looks
    for. New ones each run: an earlier run's probe has put the earlier ones in the
    attacker's own scope, where they hit without telling it anything of the victim."""
    texts = [f"the victim's private query number {i} (run {run})" for i in range(PROBE_TEXTS)]
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        response = await client.post(
            "/v1/embeddings",
            headers={"authorization": f"Bearer {key}"},
            json={"model": MODEL, "input": texts},
        )
    if response.status_code != 200:
        raise ServingFailed(f"the victim's probe texts: {response.status_code}")
    return texts


@contextmanager
def attacker_pool() -> Iterator[ProcessPoolExecutor]:
    """The attacker's process, started and its imports done before any run (a spawned
    interpreter takes a second or two to import the attacks), so the head start is the
    attack's own."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
    try:
        pool.submit(attack_in_process, Target("", "", 0), ()).result()
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


async def isolation(
    url: str,
    attacker_url: str,
    victim_key: str,
    attacker_key: str,
    burst: int,
    plan: Sequence[Sequence[str]],
    slow_within_s: float,
    load_x: float = LOAD_X,
    quiet_runs: int = 1,
) -> tuple[float, float, list[VictimFigures], list[AttackRun]]:
    """Capacity, the victim alone ``quiet_runs`` times (on ``url``), then one run per entry
    of ``plan`` (attacks at once, on ``attacker_url``); the victim's interactive load is
    ``load_x`` of capacity."""
    measured = await capacity(url, victim_key)
    rate = load_x * measured / TEXTS_PER_REQUEST
    target = Target(attacker_url, attacker_key, burst, (), slow_within_s, MODEL)
    alone = [await victim_run(url, victim_key, rate, ARRIVAL_SEED) for _ in range(quiet_runs)]
    runs = []
    with attacker_pool() as pool:
        for n, names in enumerate(plan, 1):
            seed = ARRIVAL_SEED + n
            texts = tuple(await probe_texts(url, victim_key, n))
            attacked = dataclasses.replace(target, victim_texts=texts)
            runs.append(await attacked_run(url, victim_key, attacked, names, rate, seed, pool))
    return measured, rate, alone, runs


def _quiet_clients() -> None:
    """httpx logs every request at INFO: thousands of lines of polling."""
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_isolation_bench(
    data_dir: Path, plan: Sequence[Sequence[str]] | None = None, *, shared: bool = False
) -> IsolationResults:
    """``plan``: the attacks of each run (default: each attack alone, then all at once);
    ``shared``: on throw-away Redis, Postgres and NATS, two gateways."""
    plan = plan or [*([name] for name in ATTACKS), list(ATTACKS)]
    unknown = sorted({name for names in plan for name in names} - set(ATTACKS))
    if unknown:
        raise BenchError(f"unknown attack {unknown[0]!r}; known: {', '.join(ATTACKS)}")
    _quiet_clients()
    started = time.perf_counter()
    with contextlib.ExitStack() as services:
        urls = services.enter_context(shared_services()) if shared else None
        settings = isolation_settings(data_dir, urls)
        victim_key, attacker_key, burst = prepare(settings)
        with serving(settings) as processes:
            victim_url = processes.gateway_urls[0]
            attacker_url = processes.gateway_urls[-1]
            measured, rate, alone, runs = asyncio.run(
                isolation(
                    victim_url,
                    attacker_url,
                    victim_key,
                    attacker_key,
                    burst,
                    plan,
                    stall_allowance_s(settings),
                )
            )
    seconds = time.perf_counter() - started
    if not math.isfinite(measured):
        raise BenchError("capacity could not be measured")
    return IsolationResults(measured, rate, alone[0], tuple(runs), seconds, shared)
