"""``headway bench billing``: the price of metering on the request path, and its throughput.

1. **The durable write.** ``Outbox.record`` on a real file (WAL, ``synchronous=FULL``:
   one fsync per commit) under open-loop Poisson arrivals: one coroutine per event on
   one event loop, each timed from its call to its return, as the request path awaits
   it before the 200. ``REPEATS`` runs per rate; commits per event show the group
   commit at work.
2. **Gateway CPU per request, without and with metering.** The in-process machinery
   of ``headway bench path`` (ASGI, a ``MockTransport`` replica), one 1-text
   embeddings request at a time and ``CONCURRENT`` at once, with a sink that drops
   every event (``NoSink``: the baseline; the event is still built) and with the
   gateway's real ``OutboxMetering`` on a temporary file. The two gateways take turns
   repeat by repeat, so noise on the machine falls on both. ``time.process_time``
   counts every thread, the outbox's writer included.
3. **Relay and consumer throughput.** An outbox file of ``DRAIN_EVENTS`` valid events;
   per repeat, the gateway's ``Relay`` publishes a copy of it to a stream of its own on
   a throw-away JetStream (``Nats-Msg-Id`` set, every PubAck awaited), then
   ``Consumer(JetStreamSource, PostgresLedger)`` (batches of ``DRAIN_BATCH``) drains
   that stream from empty into a fresh database; beside them the embedded pair,
   ``OutboxSource`` over another copy into an ``SQLiteLedger``.
4. **End-to-end billing lag.** Real processes as ``headway up`` starts them (a
   synthetic worker at 1 ms a call, one gateway, the billing consumer) on a throw-away
   NATS and Postgres, a fresh stack per rate of ``E2E_RATES``, driven open loop by the
   load generator; then the ledger's ``recorded_at - at`` of every event of the run,
   its rows against the 200s the client saw, and, read back from the stream, how much
   of the lag passed before JetStream stored each event.
5. **Lost and double-billed events**: the Jepsen-style checker (``bench/checker.py``) on a
   longer run, with more faults, than its CI test.

``run_billing_bench`` measures and returns ``BillingResults``; ``billing_report.render``
writes them as the Markdown section ``billing``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from headway.app.build import build_gateway_app
from headway.background import Background
from headway.billing.consumer import Consumer
from headway.billing.ledger.base import Ledger
from headway.billing.sources.base import EventSource
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.gateway.discovery.static import StaticDiscovery
from headway.gateway.service import GatewayService
from headway.http.asgi import App
from headway.metering.build import OutboxMetering, stream_config
from headway.metering.event import UsageEvent, decode, encode
from headway.metering.outbox import Outbox, OutboxFile, connect
from headway.metering.relay import Relay
from headway.metering.sink import Metering, UsageSink
from headway.metering.stream import StreamConfig
from headway.quantile import quantile
from headway.registry.model import SYSTEM
from headway.registry.open import open_registry
from headway.registry.sqlite import Registry
from headway.settings import GatewaySettings, SyntheticSettings
from headway.transport.mock import MockTransport
from headway_tools.bench.checker import CheckerReport, CheckerSpec, run_checker
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.host import process_cpu_s
from headway_tools.bench.path import (
    BATCH,
    KEY,
    REPLICA,
    WARMUP,
    WIDTH,
    Case,
    Replica,
    call_gateway,
    cases,
)
from headway_tools.bench.served import bench_settings, supervised
from headway_tools.loadgen import RequestClass, Schedule, Step, Summary, Workload, run_load_sync
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.postgres_server import PostgresServer

REPEATS = 5
WRITE_RATES = (1_000.0, 3_000.0)  # events/s offered to Outbox.record
WRITE_WARMUP = 500
FLOOR_COMMITS = 1_000  # lone commits per repeat of the floor
TICK_S = 0.001  # the arrival scheduler's shortest sleep (uvloop counts whole ms)
CONCURRENT = 32  # requests at once in the concurrent CPU runs
NO_METERING, OUTBOX = "none (NoSink)", "outbox (fsync)"
DRAIN_EVENTS = 50_000
DRAIN_REPEATS = 3
DRAIN_BATCH = 500
DRAIN_TIMEOUT_S = 300.0
RELAY = "outbox → JetStream (the gateway's relay)"
JETSTREAM_POSTGRES, OUTBOX_SQLITE = "JetStream → Postgres", "outbox → SQLite (embedded)"
E2E_RATES = (1_000.0, 400.0)  # the goal's rate, and one this machine's gateway keeps up with
E2E_SECONDS_PER_SECONDS = 2.0  # the end-to-end run lasts twice --seconds
E2E_CALL_MS = 1.0
E2E_TIMEOUT_MS = 2_000
E2E_SETTLE_S = 60.0  # longest wait, after the load, for the ledger to hold every 200
WARMUP_RPS, WARMUP_S = 200.0, 2.0
TENANT, TENANT_KEY = "bench-billing", "bench-billing-key"
WARMUP_TENANT, WARMUP_KEY = "bench-billing-warmup", "bench-billing-warmup-key"
GATEWAY, WORKER, CONSUMER, NATS, CLIENT = "gateway", "worker", "consumer", "nats", "client"

WRITE_P50_GOAL_S = 0.001
WRITE_P99_GOAL_S = 0.003
GOAL_RATE = 1_000.0  # the rate the write and lag goals are stated at
DRAIN_GOAL_PER_S = 5_000.0
LAG_P99_GOAL_S = 2.0


@dataclass(frozen=True, slots=True)
class Spread:
    """Nearest-rank quantiles (``headway.quantile``) of some durations, in seconds;
    NaN when there were none."""

    count: int
    p50_s: float
    p99_s: float
    max_s: float


def spread(samples: Sequence[float]) -> Spread:
    if not samples:
        return Spread(0, math.nan, math.nan, math.nan)
    return Spread(len(samples), quantile(samples, 0.50), quantile(samples, 0.99), max(samples))


def median_and_range(values: Sequence[float]) -> tuple[float, float, float]:
    """The median of the repeats, and the lowest and highest of them."""
    return statistics.median(values), min(values), max(values)


# 1. The durable write ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteRun:
    latency: Spread
    """From the call of ``record`` to its return, per event."""
    commits: int


@dataclass(frozen=True, slots=True)
class WritePoint:
    rate: float
    """Events per second offered (Poisson)."""
    runs: Sequence[WriteRun]

    @property
    def events(self) -> int:
        return sum(run.latency.count for run in self.runs)

    @property
    def commits_per_event(self) -> float:
        return sum(run.commits for run in self.runs) / self.events if self.events else math.nan

    @property
    def p50_s(self) -> tuple[float, float, float]:
        return median_and_range([run.latency.p50_s for run in self.runs])

    @property
    def p99_s(self) -> tuple[float, float, float]:
        return median_and_range([run.latency.p99_s for run in self.runs])

    @property
    def max_s(self) -> float:
        return max(run.latency.max_s for run in self.runs)


def usage_event(request_id: str, at: float, tenant: str = TENANT, tenant_id: int = 1) -> UsageEvent:
    """A valid event of a 1-text embeddings request, as the meter stage builds one."""
    return UsageEvent(
        request_id=request_id,
        tenant_id=tenant_id,
        tenant=tenant,
        key_id="bench-key-id",
        endpoint="embeddings",
        alias=SYNTHETIC_ALIAS,
        version="0" * 64,
        tier="interactive",
        texts=1,
        tokens=12,
        outcome="served",
        billable=True,
        queue_s=0.0005,
        inference_s=0.001,
        total_s=0.002,
        gateway_id="bench-gateway",
        at=at,
    )


async def record_open_loop(
    sink: UsageSink, events: Sequence[UsageEvent], offsets: Sequence[float]
) -> list[float]:
    """Call ``record`` for event i at ``offsets[i]`` s from now, each in its own task,
    whatever the earlier ones are doing; the seconds each call took."""
    loop = asyncio.get_running_loop()
    latencies = [0.0] * len(events)

    async def one(i: int) -> None:
        started = time.perf_counter()
        await sink.record(events[i])
        latencies[i] = time.perf_counter() - started

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter() + 0.01
    i = 0
    while i < len(events):
        now = time.perf_counter()
        while i < len(events) and start + offsets[i] <= now:
            tasks.append(loop.create_task(one(i)))
            i += 1
        if i < len(events):
            await asyncio.sleep(max(TICK_S, start + offsets[i] - now))
    await asyncio.gather(*tasks)
    return latencies


def _arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    return list(Schedule((Step(seconds, rate),), "poisson", seed=seed).offsets())


def lone_commits(conn: sqlite3.Connection, commits: int, tag: str) -> Spread:
    """``commits`` SQLite commits of one outbox row each, one after another, with no outbox
    around them: what the disk's fsync alone costs a request that arrives alone."""
    data = encode(usage_event("floor", time.time()))
    latencies = []
    for i in range(commits):
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO outbox (request_id, data, created_at) VALUES (?, ?, ?)",
            (f"floor-{tag}-{i}", data, time.time()),
        )
        conn.execute("COMMIT")
        latencies.append(time.perf_counter() - started)
    return spread(latencies)


async def write_points(folder: Path, seconds: float) -> tuple[list[Spread], list[WritePoint]]:
    """The floor and every rate of ``WRITE_RATES``, taking turns run by run, so that the
    disk's and the machine's moods fall on all of them alike."""
    floor_conn = connect(folder / "floor.sqlite3", create=True, busy_timeout_s=0.0)
    outboxes = {rate: Outbox(folder / f"write-{rate:g}.sqlite3") for rate in WRITE_RATES}
    floor: list[Spread] = []
    runs: dict[float, list[WriteRun]] = {rate: [] for rate in WRITE_RATES}
    try:
        for rate, outbox in outboxes.items():
            await outbox.start()
            warm = _arrivals(rate, WRITE_WARMUP / rate, seed=-1)
            now = time.time()
            events = [usage_event(f"warm-{rate:g}-{i}", now) for i in range(len(warm))]
            await record_open_loop(outbox, events, warm)
        for repeat in range(REPEATS):
            floor.append(lone_commits(floor_conn, FLOOR_COMMITS, str(repeat)))
            for rate, outbox in outboxes.items():
                offsets = _arrivals(rate, seconds / REPEATS, seed=repeat)
                now = time.time()
                events = [usage_event(f"w{rate:g}-{repeat}-{i}", now) for i in range(len(offsets))]
                commits = outbox.commits
                latencies = await record_open_loop(outbox, events, offsets)
                runs[rate].append(WriteRun(spread(latencies), outbox.commits - commits))
    finally:
        floor_conn.close()
        for outbox in outboxes.values():
            await outbox.close()
    return floor, [WritePoint(rate, runs[rate]) for rate in WRITE_RATES]


# 2. Gateway CPU per request -----------------------------------------------------------


class NoSink:
    """The baseline: takes every event and keeps none (no file, no thread, no fsync)."""

    full = False

    async def record(self, event: UsageEvent) -> None:
        return None

    async def start(self, background: Background) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class CpuPoint:
    sink: str
    concurrency: int
    requests: int
    commits: int
    """Outbox commits over the measured requests (0 without an outbox)."""
    cpu_us: Sequence[float]
    """CPU µs per request of each repeat."""

    @property
    def median_us(self) -> float:
        return statistics.median(self.cpu_us)

    @property
    def commits_per_request(self) -> float:
        return self.commits / self.requests if self.sink == OUTBOX else math.nan


async def _cpu_repeat(app: App, case: Case, concurrency: int, seconds: float) -> tuple[int, float]:
    """Requests sent in ``seconds`` (``concurrency`` at once) and the CPU s they took."""
    rounds = max(1, BATCH // concurrency)
    requests = 0
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - started_wall < seconds:
        for _ in range(rounds):
            if concurrency == 1:
                await call_gateway(app, case)
            else:
                await asyncio.gather(*(call_gateway(app, case) for _ in range(concurrency)))
        requests += rounds * concurrency
    return requests, time.process_time() - started_cpu


def _gateway(registry: Registry, version: str, metering: Metering) -> App:
    service = GatewayService(
        GatewaySettings(health_interval_s=3600, dns_interval_s=3600, registry_refresh_s=3600),
        registry,
        MockTransport(Replica(version), keep=False),
        {"embed": StaticDiscovery([REPLICA])},
        metering=metering,
    )
    return build_gateway_app(service, (SYNTHETIC_ALIAS,))


async def cpu_points(folder: Path, seconds: float) -> list[CpuPoint]:
    """Per (sink, concurrency): ``REPEATS`` turns of ``seconds / REPEATS``, interleaved."""
    registry = Registry(folder / "registry.sqlite3")
    registry.add_tenant(
        "bench-path", "interactive", rate_texts_per_s=1e12, burst_texts=1e12, key=KEY
    )
    record = synthetic_record(SyntheticSettings(dimensions=WIDTH))
    registry.add_model(record, (SYNTHETIC_ALIAS,))
    outbox = Outbox(folder / "cpu.sqlite3")
    apps = {
        NO_METERING: _gateway(registry, record.version, NoSink()),
        OUTBOX: _gateway(registry, record.version, OutboxMetering(outbox, None)),
    }
    case = cases()[0]  # embeddings, 1 text
    configs = [(sink, c) for c in (1, CONCURRENT) for sink in apps]
    cpu_us: dict[tuple[str, int], list[float]] = {key: [] for key in configs}
    requests = dict.fromkeys(configs, 0)
    commits = dict.fromkeys(configs, 0)
    for app in apps.values():
        await app.startup()
    try:
        for app in apps.values():
            for _ in range(WARMUP):
                await call_gateway(app, case)
        for _ in range(REPEATS):
            for key in configs:
                sink, concurrency = key
                before = outbox.commits
                sent, cpu_s = await _cpu_repeat(apps[sink], case, concurrency, seconds / REPEATS)
                cpu_us[key].append(cpu_s / sent * 1e6)
                requests[key] += sent
                commits[key] += outbox.commits - before
    finally:
        for app in apps.values():
            await app.shutdown()
    return [CpuPoint(*key, requests[key], commits[key], cpu_us[key]) for key in configs]


# 3. Relay and consumer throughput ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrainRun:
    events: int
    seconds: float
    cpu_s: float
    """CPU of this process (the relay's or the consumer's); NATS's and the database's are
    not in it."""

    @property
    def per_s(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s / self.events * 1e6


@dataclass(frozen=True, slots=True)
class DrainPoint:
    pair: str
    runs: Sequence[DrainRun]

    @property
    def per_s(self) -> tuple[float, float, float]:
        return median_and_range([run.per_s for run in self.runs])

    @property
    def cpu_us_per_event(self) -> float:
        return statistics.median(run.cpu_us_per_event for run in self.runs)


async def drain(source: EventSource, ledger: Ledger, events: int) -> DrainRun:
    """Run the consumer from the first fetch until the ledger holds ``events`` new ones."""
    consumer = Consumer(source, ledger, batch_events=DRAIN_BATCH)
    done = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while done < events:
        if time.perf_counter() - started > DRAIN_TIMEOUT_S:
            raise ServingFailed(f"the consumer wrote {done} of {events} events in time")
        applied = await consumer.step()
        if applied is not None:
            done += applied.new
    return DrainRun(done, time.perf_counter() - started, time.process_time() - started_cpu)


def drain_events(count: int) -> list[UsageEvent]:
    now = time.time()
    return [
        usage_event(f"drain-{i:07d}", now, f"tenant-{i % 10}", i % 10 + 1) for i in range(count)
    ]


async def relay_run(outbox: Path, config: StreamConfig, events: int) -> DrainRun:
    """The gateway's ``Relay`` over an outbox file of ``events`` rows, until JetStream has
    acknowledged them all (stored, fsynced, each keyed by ``Nats-Msg-Id``)."""
    relay = Relay(OutboxFile(outbox), config)
    started, started_cpu = time.perf_counter(), time.process_time()
    task = asyncio.get_running_loop().create_task(relay.run(), name="bench relay")
    try:
        while relay.published_total < events:
            if task.done():
                task.result()
                raise ServingFailed("the relay stopped")
            if time.perf_counter() - started > DRAIN_TIMEOUT_S:
                raise ServingFailed(f"the relay published {relay.published_total} of {events}")
            await asyncio.sleep(0.01)  # poll interval of the condition wait above
        elapsed, cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return DrainRun(relay.published_total, elapsed, cpu_s)


def _copy(filled: Path, folder: Path) -> Path:
    """A copy of the filled outbox, alone in ``folder``, as one gateway's file."""
    folder.mkdir()
    copy = folder / "bench-gateway.sqlite3"
    shutil.copyfile(filled, copy)
    return copy


async def jetstream_drains(
    folder: Path, filled: Path, nats: NatsServer, postgres: PostgresServer, events: int
) -> list[DrainPoint]:
    """Per repeat: the relay fills a stream of its own from a copy of the outbox, then the
    consumer drains that stream into a database of its own."""
    from headway.billing.ledger.postgres import PostgresLedger
    from headway.billing.sources.jetstream import JetStreamSource

    relays, drains = [], []
    for repeat in range(DRAIN_REPEATS):
        config = StreamConfig(
            servers=(nats.url,),
            monitor_urls=(nats.monitor_url,),
            stream=f"DRAIN{repeat}",
            subject=f"drain.{repeat}",
            durable=f"drain-{repeat}",
        )
        relays.append(await relay_run(_copy(filled, folder / f"relay-{repeat}"), config, events))
        database = f"drain_{repeat}"
        postgres.psql(f"CREATE DATABASE {database}")
        ledger = await PostgresLedger.open(postgres.url_of(database))
        source = JetStreamSource(config)
        try:
            drains.append(await drain(source, ledger, events))
        finally:
            await source.close()
            await ledger.close()
    return [DrainPoint(RELAY, relays), DrainPoint(JETSTREAM_POSTGRES, drains)]


async def fill_outbox(path: Path, events: Sequence[UsageEvent]) -> None:
    outbox = Outbox(path)
    await outbox.start()
    try:
        for low in range(0, len(events), 5_000):
            await asyncio.gather(*(outbox.record(e) for e in events[low : low + 5_000]))
    finally:
        await outbox.close()


async def outbox_drain(folder: Path, filled: Path, events: int) -> DrainPoint:
    from headway.billing.ledger.sqlite import SQLiteLedger
    from headway.billing.sources.outbox import OutboxSource

    runs = []
    for repeat in range(DRAIN_REPEATS):
        outboxes = _copy(filled, folder / f"outboxes-{repeat}").parent
        ledger = await SQLiteLedger.open(folder / f"ledger-{repeat}.sqlite3")
        source = OutboxSource(outboxes)
        try:
            runs.append(await drain(source, ledger, events))
        finally:
            await source.close()
            await ledger.close()
    return DrainPoint(OUTBOX_SQLITE, runs)


# 4. End to end -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndToEnd:
    offered_rps: float
    seconds: float
    load: Summary
    """The load generator's summary of the measured run."""
    behind_schedule: bool
    lag: Spread
    """``recorded_at - at`` over the ledger rows of the measured run's tenant."""
    stream_lag: Spread
    """JetStream's store time minus ``at``, same events: the outbox's and the relay's share."""
    billable_rows: int
    refunded_rows: int
    cores: Mapping[str, float]
    """CPU seconds per wall-clock second of each process over the run."""
    gateway_cpu_s: float
    """The gateway's CPU seconds over the run."""

    @property
    def gateway_ms_per_request(self) -> float:
        """The gateway's CPU per request answered 200, in milliseconds."""
        return self.gateway_cpu_s / self.load.served * 1000 if self.load.served else math.nan

    @property
    def missing(self) -> int:
        """200s the client saw with no billable row in the ledger (negative: more rows,
        from requests the gateway served after the client gave up)."""
        return self.load.served - self.billable_rows


def _workload(key: str) -> Workload:
    return Workload(
        (
            RequestClass(
                "metered",
                key,
                model=SYNTHETIC_ALIAS,
                texts=(1, 1),
                words=(8, 16),
                timeout_ms=E2E_TIMEOUT_MS,
            ),
        ),
        seed=3,
    )


def _ledger_rows(postgres: PostgresServer, database: str) -> list[tuple[float, bool]]:
    """(recorded_at - at, billable) of each row of the measured tenant."""
    text = postgres.psql(
        f"SELECT recorded_at - at, billable FROM processed_requests WHERE tenant = '{TENANT}'",
        database,
    )
    rows = []
    for line in text.splitlines():
        if line:
            lag, _, billable = line.partition("|")
            rows.append((float(lag), billable == "t"))
    return rows


async def stream_lags(config: StreamConfig) -> list[float]:
    """For each of the measured tenant's events on the stream, when JetStream stored it
    minus its ``at``; read by a durable of its own, from the first event."""
    from headway.billing.sources.jetstream import JetStreamSource

    source = JetStreamSource(replace(config, durable="bench-audit"))
    lags = []
    try:
        while deliveries := await source.fetch(DRAIN_BATCH, 1.0):
            for delivery in deliveries:
                event = decode(delivery.data)
                if event.tenant == TENANT and delivery.published_at is not None:
                    lags.append(delivery.published_at - event.at)
            await source.ack(deliveries)
    finally:
        await source.close()
    return lags


def _wait_for_ledger(postgres: PostgresServer, database: str, served: int) -> None:
    """Until the tenant's billable rows reach ``served``, or ``E2E_SETTLE_S`` has passed."""
    count = f"SELECT count(*) FROM processed_requests WHERE tenant = '{TENANT}' AND billable"
    deadline = time.monotonic() + E2E_SETTLE_S
    while int(postgres.psql(count, database).strip() or 0) < served:
        if time.monotonic() > deadline:
            return  # the shortfall is reported, not hidden
        time.sleep(0.25)  # poll interval of the condition wait above


def end_to_end(folder: Path, postgres: PostgresServer, rps: float, seconds: float) -> EndToEnd:
    """One fresh stack (its own NATS, its own database) offered ``rps`` for ``seconds``."""
    database = f"e2e_{rps:.0f}"
    postgres.psql(f"CREATE DATABASE {database}")
    with NatsServer() as nats:
        return _end_to_end(folder, nats, postgres, database, rps, seconds)


def _end_to_end(
    folder: Path,
    nats: NatsServer,
    postgres: PostgresServer,
    database: str,
    rps: float,
    seconds: float,
) -> EndToEnd:
    settings = bench_settings(
        folder,
        {"backend": "synthetic", "synthetic": {"call_ms": E2E_CALL_MS, "text_ms": 0}},
        {"quota": {"enabled": True}},
    )
    settings = settings.model_copy(
        update={
            "nats_url": nats.url,
            "postgres_url": postgres.url_of(database),
            "streams": settings.streams.model_copy(update={"monitor_urls": nats.monitor_url}),
        }
    )
    with contextlib.closing(open_registry(settings)) as shared:  # on the Postgres too
        shared.seed_demo()
        shared.add_model(
            synthetic_record(settings.worker.synthetic), (SYNTHETIC_ALIAS,), actor=SYSTEM
        )
        for name, key in ((TENANT, TENANT_KEY), (WARMUP_TENANT, WARMUP_KEY)):
            shared.add_tenant(
                name, "interactive", actor=SYSTEM, rate_texts_per_s=1e6, burst_texts=1e6, key=key
            )
    client_timeout_s = E2E_TIMEOUT_MS / 1000 + 1.0
    with supervised(settings) as supervisor:
        gateway = supervisor.gateways[0]
        pids = {
            GATEWAY: gateway.process.pid,
            WORKER: next(c for c in supervisor.children if "worker" in c.name).process.pid,
            CONSUMER: next(c for c in supervisor.children if c.name == "billing").process.pid,
            NATS: nats.pid or 0,
            CLIENT: os.getpid(),
        }
        run_load_sync(
            gateway.url,
            _workload(WARMUP_KEY),
            Schedule((Step(WARMUP_S, WARMUP_RPS),), "poisson", seed=1),
            client_timeout_s=client_timeout_s,
        )
        before = {name: process_cpu_s(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        result = run_load_sync(
            gateway.url,
            _workload(TENANT_KEY),
            Schedule((Step(seconds, rps),), "poisson", seed=2),
            client_timeout_s=client_timeout_s,
        )
        wall_s = time.perf_counter() - started
        cpu_s = {name: process_cpu_s(pid) - before[name] for name, pid in pids.items()}
        _wait_for_ledger(postgres, database, result.report.overall.served)
    rows = _ledger_rows(postgres, database)
    on_stream = asyncio.run(stream_lags(stream_config(settings)))
    return EndToEnd(
        offered_rps=rps,
        seconds=seconds,
        load=result.report.overall,
        behind_schedule=result.report.behind_schedule,
        lag=spread([lag for lag, _ in rows]),
        stream_lag=spread(on_stream),
        billable_rows=sum(1 for _, billable in rows if billable),
        refunded_rows=sum(1 for _, billable in rows if not billable),
        cores={name: used / wall_s for name, used in cpu_s.items()},
        gateway_cpu_s=cpu_s[GATEWAY],
    )


# 5. The checker ------------------------------------------------------------------------


CHECKER_SECONDS_PER_SECONDS = 6.0  # its load runs six times --seconds (CI: 15 s)


def checker_spec(seconds: float) -> CheckerSpec:
    """Shared mode, longer than its CI test, with more of every fault."""
    return CheckerSpec(
        mode="shared",
        duration_s=CHECKER_SECONDS_PER_SECONDS * seconds,
        consumer_kills=5,
        gateway_kills=2,
        nats_kills=2,
        duplicates_share=0.05,
        seed=7,
    )


def checker_report(workdir: Path, seconds: float) -> CheckerReport | str:
    """The checker's report, or why it could not run (the figures above still stand)."""
    try:
        return run_checker(checker_spec(seconds), workdir)
    except ServingFailed as exc:
        return f"the checker could not start its system: {exc}"


# The whole bench -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BillingResults:
    floor: Sequence[Spread]
    """``lone_commits``, per repeat."""
    writes: Sequence[WritePoint]
    cpu: Sequence[CpuPoint]
    drains: Sequence[DrainPoint]
    end_to_end: Sequence[EndToEnd]
    """One per rate of ``E2E_RATES``."""
    checker: CheckerReport | str
    """Its report, or why it did not run."""


def run_billing_bench(data_dir: Path, *, seconds: float) -> BillingResults:
    """``data_dir`` is not touched: every file, process and database is made for the run."""
    import uvloop

    with tempfile.TemporaryDirectory(prefix="headway-bench-billing-") as scratch:
        root = Path(scratch)
        for name in ("write", "cpu", "drain", "checker"):
            (root / name).mkdir()
        floor, writes = uvloop.run(write_points(root / "write", seconds))
        cpu = uvloop.run(cpu_points(root / "cpu", seconds))
        filled = root / "drain" / "filled.sqlite3"
        uvloop.run(fill_outbox(filled, drain_events(DRAIN_EVENTS)))
        with PostgresServer() as postgres:
            with NatsServer() as nats:
                drains = uvloop.run(
                    jetstream_drains(root / "drain", filled, nats, postgres, DRAIN_EVENTS)
                )
            drains.append(uvloop.run(outbox_drain(root / "drain", filled, DRAIN_EVENTS)))
            e2e = [
                end_to_end(
                    root / f"e2e-{rps:.0f}", postgres, rps, E2E_SECONDS_PER_SECONDS * seconds
                )
                for rps in E2E_RATES
            ]
        checker = checker_report(root / "checker", seconds)
    return BillingResults(floor, writes, cpu, drains, e2e, checker)
