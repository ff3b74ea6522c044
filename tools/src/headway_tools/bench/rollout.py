"""Rollouts: how fast a bad canary is rolled back, what shadow traffic costs, how fast a
split reaches every gateway.

1. **Bad canary**: two synthetic replicas, the candidate's failing 20% of its model
   calls (``fail_share``); open-loop load on the alias; a rollout with steps 10%, 50%,
   100% starts with the load. Measured: seconds from the start to the automatic
   rollback, and the client-visible errors meanwhile against the canary's share of
   the requests in that time.
2. **Shadow cost**: the real model, fp32 primary and its int8 variant on the same
   worker (one process, one inference thread for both); open-loop load at about a
   quarter of capacity, first with no split, then with every request shadowed to
   int8: the primary's p95 and goodput. Then the same split at 5x that rate, past the
   pool's capacity: shadow copies sent against skipped.
3. **Split propagation**: ``headway up --gateways 3``; a split flipped on the first
   gateway's admin API, timed until the two others answer with the new version,
   with the registry on SQLite (embedded) and on Postgres (shared).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from headway.catalog import SYNTHETIC_ALIAS, ensure_default_model, register, synthetic_record
from headway.registry.open import open_registry
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import Settings, SyntheticSettings
from headway.up.supervisor import Supervisor
from headway_tools.bench.errors import BenchError
from headway_tools.bench.served import bench_settings, supervised
from headway_tools.loadgen import RequestClass, Schedule, Step, Summary, Workload, run_load
from headway_tools.testing.postgres_server import PostgresServer

ADMIN = {"authorization": f"Bearer {DEMO_ADMIN_KEY}"}
TENANT_KEY = "demo-key-search-app"
CHEAP = {"call_ms": 2.0, "text_ms": 0.1}
CANARY_STEPS = (10, 50, 100)
CANARY_RPS = 40.0
FAIL_SHARE = 0.2
SHADOW_RPS = 8.0
SHADOW_TEXTS = 4
OVERLOAD_FACTOR = 5.0
FLIPS = 10
GATEWAYS = 3
MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True, slots=True)
class CanaryResult:
    interval_s: float
    seconds_to_rollback: float
    requests_meanwhile: float
    errors: int
    reason: str

    @property
    def allowed_errors(self) -> float:
        """The canary's share of the requests sent before it was rolled back."""
        return CANARY_STEPS[0] / 100 * self.requests_meanwhile


@dataclass(frozen=True, slots=True)
class ShadowPoint:
    name: str
    rate_rps: float
    summary: Summary
    shadow: Mapping[str, float]
    """Shadow copies by outcome (compared, failed, skipped) during the run."""


@dataclass(frozen=True, slots=True)
class Propagation:
    registry: str
    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def max_s(self) -> float:
        return max(self.seconds)


@dataclass(frozen=True, slots=True)
class RolloutResults:
    canary: CanaryResult
    shadow: tuple[ShadowPoint, ...]
    propagation: tuple[Propagation, ...]
    seconds: float


def run_rollout_bench(data_dir: Path, *, seconds: float, interval_s: float) -> RolloutResults:
    with PostgresServer(fsync=False) as postgres:
        canary = bad_canary(data_dir / "canary", postgres.url_of("postgres"), interval_s)
        propagation = (
            split_propagation(data_dir / "sqlite", None),
            split_propagation(data_dir / "postgres", postgres.url_of("postgres")),
        )
    shadow = shadow_cost(data_dir / "shadow", seconds)
    return RolloutResults(canary, shadow, propagation, seconds)


# 1. bad canary ---------------------------------------------------------------------


def bad_canary(data_dir: Path, postgres_url: str, interval_s: float) -> CanaryResult:
    settings = _synthetic_settings(data_dir, postgres_url, embed_replicas=2)
    failing = {"embed-worker-1": {"HEADWAY_WORKER__SYNTHETIC__FAIL_SHARE": str(FAIL_SHARE)}}
    candidate = synthetic_record(SyntheticSettings(**CHEAP, fail_share=FAIL_SHARE)).version
    duration_s = 6 * interval_s
    with _stack(settings, failing) as supervisor:
        url = supervisor.gateways[0].url
        client = httpx.Client(base_url=url, timeout=30)

        def roll_out() -> tuple[float, dict[str, Any]]:
            body = {
                "alias": SYNTHETIC_ALIAS,
                "to": candidate,
                "steps": list(CANARY_STEPS),
                "interval_s": interval_s,
                "min_requests": 10,
            }
            started = time.perf_counter()
            reply = client.post("/admin/rollouts", json=body, headers=ADMIN)
            if reply.status_code != 201:
                raise BenchError(f"the rollout did not start: {reply.text}")
            rollout_id = reply.json()["id"]
            final = _wait(
                lambda: _ended(client, rollout_id), duration_s - 1, "the canary's judgement"
            )
            return time.perf_counter() - started, final

        load = run_load(
            url,
            _workload(SYNTHETIC_ALIAS, 2),
            Schedule((Step(duration_s, CANARY_RPS),), "poisson", seed=1),
            client_timeout_s=5.0,
        )
        with client:
            result, (took_s, final) = asyncio.run(_beside(load, roll_out))
    if final["state"] != "rolled_back":
        raise BenchError(f"the failing canary was not rolled back: {final}")
    overall = result.report.overall
    return CanaryResult(
        interval_s, took_s, took_s * CANARY_RPS, overall.offered - overall.served, final["reason"]
    )


# 2. shadow cost ---------------------------------------------------------------------


def shadow_cost(data_dir: Path, seconds: float) -> tuple[ShadowPoint, ...]:
    settings = bench_settings(data_dir, {"registry_poll_s": 0.2}, {"registry_poll_s": 0.2})
    registry = open_registry(settings)
    registry.seed_demo()
    fp32 = ensure_default_model(settings, registry)
    from headway.models.importer import quantize_int8
    from headway.models.store import ModelStore

    store = ModelStore(settings.model_root)
    int8 = register(registry, quantize_int8(store, store.get(fp32.version)), ())
    shadowed = {"weights": {fp32.version: 1}, "shadow": {"version": int8.version, "share": 1.0}}
    points = []
    with _stack(settings) as supervisor, _clients(supervisor) as (client,):
        url, metrics_url = supervisor.gateways[0].url, supervisor.gateways[0].metrics_url
        _load_point(url, "warm-up", SHADOW_RPS, min(seconds, 5.0), metrics_url)
        points.append(_load_point(url, "no shadow", SHADOW_RPS, seconds, metrics_url))
        reply = client.put(f"/admin/splits/{MODEL}", json=shadowed, headers=ADMIN)
        if reply.status_code != 200:
            raise BenchError(f"the shadow split was refused: {reply.text}")
        _wait(lambda: int8.version in _served(client), 60, "the worker to load int8")
        points.append(_load_point(url, "every request shadowed", SHADOW_RPS, seconds, metrics_url))
        at_capacity = OVERLOAD_FACTOR * SHADOW_RPS
        points.append(_load_point(url, "shadowed, at capacity", at_capacity, seconds, metrics_url))
    return tuple(points)


def _load_point(url: str, name: str, rate: float, seconds: float, metrics_url: str) -> ShadowPoint:
    before = _shadow_counts(metrics_url)
    load = run_load(
        url,
        _workload(MODEL, SHADOW_TEXTS),
        Schedule((Step(seconds, rate),), "poisson", seed=2),
        client_timeout_s=5.0,
    )
    result = asyncio.run(load)
    after = _shadow_counts(metrics_url)
    shadow = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return ShadowPoint(name, rate, result.report.overall, shadow)


_SHADOW_LINE = re.compile(r'^headway_shadow_requests_total\{[^}]*outcome="(\w+)"[^}]*\} (\S+)$')


def _shadow_counts(metrics_url: str) -> dict[str, float]:
    """The gateway's shadow outcomes so far (``metrics_url``: its operations listener)."""
    counts: dict[str, float] = {}
    for line in httpx.get(metrics_url + "/metrics", timeout=30).text.splitlines():
        match = _SHADOW_LINE.match(line)
        if match:
            counts[match[1]] = counts.get(match[1], 0.0) + float(match[2])
    return counts


# 3. split propagation -------------------------------------------------------------


def split_propagation(data_dir: Path, postgres_url: str | None) -> Propagation:
    settings = _synthetic_settings(data_dir, postgres_url, embed_replicas=2)
    settings = settings.model_copy(
        update={"up": settings.up.model_copy(update={"gateways": GATEWAYS})}
    )
    seeded = {"embed-worker-1": {"HEADWAY_WORKER__SYNTHETIC__SEED": "1"}}
    versions = (
        synthetic_record(SyntheticSettings(**CHEAP)).version,
        synthetic_record(SyntheticSettings(**CHEAP, seed=1)).version,
    )
    times = []
    with _stack(settings, seeded) as supervisor, _clients(supervisor) as clients:
        first, others = clients[0], clients[1:]
        _wait(lambda: all(set(versions) <= _served(c) for c in clients), 30, "both versions")
        for flip in range(FLIPS):
            version = versions[flip % 2]
            started = time.perf_counter()
            body = {"weights": {version: 1}}
            reply = first.put(f"/admin/splits/{SYNTHETIC_ALIAS}", json=body, headers=ADMIN)
            if reply.status_code != 200:
                raise BenchError(f"the split was refused: {reply.text}")
            _wait(partial(_all_answer_with, others, version), 10, "the flip")
            times.append(time.perf_counter() - started)
    name = "SQLite (embedded)" if postgres_url is None else "Postgres (shared)"
    return Propagation(name, tuple(times))


def _all_answer_with(clients: list[httpx.Client], version: str) -> bool:
    return all(_answered_by(client) == version for client in clients)


def _answered_by(client: httpx.Client) -> str:
    reply = client.post(
        "/v1/embeddings",
        json={"model": SYNTHETIC_ALIAS, "input": "which version?"},
        headers={"authorization": f"Bearer {TENANT_KEY}"},
    )
    return str(reply.headers.get("x-model-version", ""))


# shared -------------------------------------------------------------------------------


def _synthetic_settings(
    data_dir: Path, postgres_url: str | None, *, embed_replicas: int
) -> Settings:
    settings = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": CHEAP, "registry_poll_s": 0.2},
        {"rollout_tick_s": 0.2},
        embed_replicas=embed_replicas,
    )
    if postgres_url is None:
        return settings
    # One database per measurement: a schema of its own would not reach both drivers.
    return settings.model_copy(update={"postgres_url": _fresh_database(postgres_url)})


def _fresh_database(server_url: str) -> str:
    import secrets

    import psycopg

    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@contextmanager
def _stack(
    settings: Settings, worker_env: Mapping[str, Mapping[str, str]] | None = None
) -> Iterator[Supervisor]:
    """The processes, ready, on a registry seeded with the demo tenants."""
    with closing(open_registry(settings)) as registry:
        registry.seed_demo()
    with supervised(settings, worker_env) as supervisor:
        yield supervisor


@contextmanager
def _clients(supervisor: Supervisor) -> Iterator[list[httpx.Client]]:
    """A client per gateway, the first gateway's first."""
    clients = [httpx.Client(base_url=g.url, timeout=10) for g in supervisor.gateways]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def _served(client: httpx.Client) -> set[str]:
    replicas = client.get("/admin/replicas", headers=ADMIN).json()["pools"]
    return {v for pool in replicas.values() for r in pool for v in r.get("versions", [])}


def _ended(client: httpx.Client, rollout_id: int) -> dict[str, Any] | None:
    rollout = client.get(f"/admin/rollouts/{rollout_id}", headers=ADMIN).json()
    return rollout if rollout["state"] in {"rolled_back", "succeeded", "halted"} else None


def _workload(model: str, texts: int) -> Workload:
    return Workload(
        (RequestClass("load", TENANT_KEY, model=model, texts=(texts, texts), timeout_ms=2000),)
    )


async def _beside(load: Any, act: Callable[[], Any]) -> tuple[Any, Any]:
    """The load's result and ``act()``'s (run in a thread once the load is under way)."""
    running = asyncio.ensure_future(load)
    await asyncio.sleep(1.0)  # the load's connections are warm and its first requests out
    value = await asyncio.to_thread(act)
    return await running, value


def _wait(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise BenchError(f"timed out after {timeout_s:.0f}s waiting for {what}")
