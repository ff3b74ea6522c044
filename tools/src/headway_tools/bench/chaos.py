"""The chaos run: the whole shared stack, every process killed or restarted in turn.

On this machine, each a separate process in its own process group (logs in
``workdir/logs``): throw-away Postgres (fsync on: registry, ledger, batch store), Redis
(quotas) and NATS (JetStream with ``sync_interval: always``: usage events and batch
work), three synthetic embed workers, two gateways (``gw-a``, ``gw-b``: their outboxes
in ``workdir/data/outbox``, relayed to JetStream), the billing consumer and two batch
executors (one JetStream durable consumer, the store on Postgres), wired as
``headway up``'s shared mode wires them.

The load: three interactive tenants send open-loop (Poisson) embeddings requests of
``TEXTS`` texts with a deadline, spread over both gateways; ``chaos-a`` is offered about
``QUOTA_OVERLOAD`` times its quota, so its bucket binds. Before the chaos starts the batch
tenant uploads a ``lines``-line file and creates a batch.

The chaos: ``chaos_verdict.chaos_plan`` (seeded; printed in the report, so a failure is
replayed by its seed) names a step every few seconds for ``chaos_s``: SIGKILL, or restart
(SIGTERM, wait for the exit, start again), a random process, the databases and NATS
included. A step holds its target's lock, so steps on one target never overlap; steps on
different targets may. A restarted gateway keeps its id and data dir (its outbox: what
it left is relayed after the restart, as on a StatefulSet's volume). Every headway
process comes back on the same port. One that exits on its own (it could not reach a
database at start, say) is recorded and started again, as a supervisor would.

Then the load stops and the run settles, by conditions with a deadline: the batch has
ended, every outbox is empty, JetStream's usage consumer has nothing pending and the
ledger's count held over one poll. ``chaos_verdict`` judges what was gathered.

``ChaosSpec.plants`` switches on planted bugs (``headway.plants``) in every process: the
run must then fail, each bug caught by its own check, which ``tests/e2e/test_chaos.py``
checks (bugs of different processes, with different signatures, share a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import msgspec
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from headway.batches.model import line_request_id
from headway.billing.ledger.open import open_ledger
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.metering.outbox import OutboxFile
from headway.metering.stream import StreamConfig
from headway.metering.stream import connect as connect_nats
from headway.plants import Plant
from headway.registry.model import SYSTEM
from headway.registry.postgres import PostgresRegistry
from headway.settings import SyntheticSettings
from headway_tools.bench.chaos_verdict import (
    BillingVerdict,
    ChaosStep,
    DeadlineShare,
    LedgerRow,
    LineVerdict,
    QuotaVerdict,
    Window,
    billing_verdict,
    chaos_plan,
    deadline_share,
    line_verdict,
    local_periods,
    quota_verdict,
    seconds_outside,
    timeline,
)
from headway_tools.bench.checker import _HTTP_ERRORS, _NATS_ERRORS, DURABLE, STREAM, _Process, tail
from headway_tools.bench.errors import ServingFailed
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.redis_server import RedisServer
from headway_tools.testing.server import ServerProcess

DATABASE = "chaos"
DIMENSIONS = 16
GATEWAYS = ("gw-a", "gw-b")
WORKERS = ("worker-0", "worker-1", "worker-2")
EXECUTORS = ("executor-0", "executor-1")
SERVERS = ("postgres", "redis", "nats")
TARGETS = (*GATEWAYS, *WORKERS, "consumer", *EXECUTORS, *SERVERS)
"""What the chaos may kill or restart: every process of the stack."""
QUOTA_TENANT = "chaos-a"
TENANTS = (QUOTA_TENANT, "chaos-b", "chaos-c")
BATCH_TENANT = "chaos-batch"
QUOTA_RATE, QUOTA_BURST = 20.0, 40.0
"""``chaos-a``'s bucket (texts/s, texts); the others' cannot bind."""
QUOTA_OVERLOAD = 2.0
"""``chaos-a`` is offered this many times its rate."""
TEXTS = 2
DEADLINE_MS = 2000
WINDOW_S = 10.0
"""The report's timeline: one row per this many seconds."""
STOP_TIMEOUT_S = 30.0
"""A restart's SIGTERM waits this long for the exit before a SIGKILL."""
RETRY_START_S = 0.5
"""A process that exited before it was ready is started again after this pause."""
POLL_S = 0.5
CHILD_ENV = {
    "HEADWAY_LOG_LEVEL": "info",
    "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "2",
    "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0.2",
    "HEADWAY_WORKER__SYNTHETIC__DIMENSIONS": str(DIMENSIONS),
    "HEADWAY_BILLING__ACK_WAIT_S": "2",  # a killed consumer's batch comes back in 2 s
    "HEADWAY_GATEWAY__QUOTA__GATEWAYS": str(len(GATEWAYS)),  # N right from the start
    "HEADWAY_GATEWAY__CACHE__ENABLED": "false",  # every line and request really runs
    "HEADWAY_BATCHES__EXECUTOR__POLL_S": "0.2",
    "HEADWAY_BATCHES__EXECUTOR__LEASE_S": "10",
}


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    chaos_s: float = 120.0
    """How long the chaos loop runs (the interactive load with it)."""
    lines: int = 5000
    """Lines of the batch."""
    rate_rps: float = 8.0
    """Each interactive tenant's request rate (``chaos-a``: set by its quota instead)."""
    seed: int = 0
    every_s: tuple[float, float] = (2.0, 5.0)
    """A chaos step every this many seconds (uniform)."""
    down_s: tuple[float, float] = (0.2, 2.0)
    targets: tuple[str, ...] = TARGETS
    plan: tuple[ChaosStep, ...] | None = None
    """Explicit steps instead of the seeded plan (a planted bug's test)."""
    plants: tuple[Plant, ...] = ()
    ready_timeout_s: float = 90.0
    settle_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        unknown = set(self.targets) - set(TARGETS)
        if self.plan is not None:
            unknown |= {step.target for step in self.plan} - set(TARGETS)
        if unknown:
            raise ValueError(f"unknown chaos targets: {sorted(unknown)}")
        if self.chaos_s <= 0 or self.lines <= 0 or self.rate_rps <= 0:
            raise ValueError("chaos_s, lines and rate_rps must be positive")

    def steps(self) -> list[ChaosStep]:
        if self.plan is not None:
            return sorted(self.plan)
        return chaos_plan(self.seed, self.chaos_s, self.targets, self.every_s, self.down_s)


@dataclass(frozen=True, slots=True)
class ChaosReport:
    spec: ChaosSpec
    plan: tuple[ChaosStep, ...]
    steps_done: Mapping[str, int]
    """``"kill postgres"`` → how many ran."""
    unexpected_exits: tuple[str, ...]
    settled: bool
    settle_s: float
    load_s: float
    batch_status: str
    batch_s: float | None
    """From the batch's creation to its end (None: it never ended)."""
    billing: BillingVerdict
    lines: LineVerdict
    quota: QuotaVerdict
    deadlines: tuple[DeadlineShare, ...]
    timeline: tuple[Window, ...]
    """All interactive tenants, by ``WINDOW_S`` of the run, beside the steps begun."""
    statuses: Mapping[int, int]
    """Interactive answers by status (0: no answer)."""
    no_answer: Mapping[str, int]
    """The requests without an answer, by why: ``no gateway reachable`` (both refused the
    connection), ``timed out`` (the client's deadline + 3 s), ``cut off``."""
    aggregate_problems: tuple[str, ...]
    outbox_left: tuple[tuple[str, str, int], ...] = ()
    """Each gateway step: (action, gateway, events left in its outbox once it was down,
    relayed by the same id after its restart)."""
    examples: Mapping[str, Sequence[str]] = field(default_factory=dict)
    log_tails: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.settled
            and self.batch_status == "completed"
            and self.billing.ok
            and self.lines.ok
            and self.quota.ok
            and not self.aggregate_problems
        )

    @property
    def failures(self) -> list[str]:
        """What did not hold, one phrase each (empty when ``ok``)."""
        found = []
        if not self.settled:
            found.append("the run did not settle")
        if self.batch_status != "completed":
            found.append(f"the batch ended {self.batch_status}")
        b, lines = self.billing, self.lines
        for name, count in (
            ("lost 200s", len(b.lost)),
            ("double billed", b.double_billed),
            ("refunded 200s", len(b.refunded_200)),
            ("200s billed with other texts", len(b.wrong_texts)),
            ("errors billed", len(b.billed_after_error)),
            ("batch lines missing", len(lines.missing)),
            ("batch lines duplicated", len(lines.duplicated)),
            ("unknown batch lines", len(lines.unknown)),
            ("batch lines unbilled", len(lines.unbilled)),
            ("batch errors billed", len(lines.billed_errors)),
            ("aggregate problems", len(self.aggregate_problems)),
        ):
            if count:
                found.append(f"{name}: {count}")
        if not self.quota.ok:
            found.append(
                f"quota over-admission: {self.quota.granted_texts} texts granted, allowance "
                f"{self.quota.allowance_texts:.0f}"
            )
        return found

    def describe(self, *, tails: bool = True) -> str:
        spec, b, lines, q = self.spec, self.billing, self.lines, self.quota
        steps = ", ".join(f"{name} {count}" for name, count in sorted(self.steps_done.items()))
        out = [
            f"chaos run, seed {spec.seed}{f', planted {spec.plants}' if spec.plants else ''}: "
            + ("OK" if self.ok else "FAILED: " + "; ".join(self.failures)),
            f"  chaos {spec.chaos_s:.0f} s, {len(self.plan)} steps planned: {steps or 'none'}",
            f"  unexpected exits (restarted): {len(self.unexpected_exits)}",
            f"  interactive: {dict(sorted(self.statuses.items()))} over {self.load_s:.1f} s; "
            f"no answer: {dict(sorted(self.no_answer.items()))}",
            f"  batch: {lines.lines} lines, {self.batch_status}"
            + (f" in {self.batch_s:.1f} s" if self.batch_s is not None else "")
            + f"; {lines.in_output} in the output, {lines.in_errors} in the errors",
            f"  settled: {self.settled} after {self.settle_s:.1f} s",
            f"  billing: {b.answered_200} answered 200 (lines included), {b.billable_rows} "
            f"billable rows; lost {len(b.lost)}, double billed {b.double_billed}, billed "
            f"without a 200 {b.billed_without_200}",
            f"  lines: missing {len(lines.missing)}, duplicated {len(lines.duplicated)}, "
            f"unbilled {len(lines.unbilled)}",
            f"  quota {q.tenant}: granted {q.granted_texts} texts, contract "
            f"{q.contract_texts:.0f}, allowance {q.allowance_texts:.0f}, {q.refused} refused",
        ]
        out += [
            f"  in deadline {d.tenant}: {d.share:.3f} ({d.in_deadline}/{d.sent - d.over_quota})"
            for d in self.deadlines
        ]
        left = ", ".join(f"{a} {g}: {n}" for a, g, n in self.outbox_left)
        out.append(f"  events left in a stopped gateway's outbox: {left or 'no gateway step'}")
        out += [f"  aggregate: {problem}" for problem in self.aggregate_problems[:10]]
        out += [f"  unexpected exit: {exit_}" for exit_ in self.unexpected_exits]
        out += [f"  {kind}: {', '.join(ids)}" for kind, ids in self.examples.items() if ids]
        out.append("  plan (replay with the same seed):")
        out += [f"    {step.describe()}" for step in self.plan]
        if tails:
            out += [f"--- {name} log (end) ---\n{text}" for name, text in self.log_tails.items()]
        return "\n".join(out)


def run_chaos(spec: ChaosSpec, workdir: Path) -> ChaosReport:
    """The whole run (minutes); every process it started is gone when it returns or
    raises. ``ServingFailed`` if the stack could not be started."""
    run = _Run(spec, workdir)
    if run.data_dir.exists():
        raise FileExistsError(f"{run.data_dir} exists: give each run a fresh workdir")
    return asyncio.run(run.check())


@dataclass(slots=True)
class _Tenant:
    name: str
    key: str
    rate_rps: float
    outcomes: list[tuple[int | None, float]] = field(default_factory=list)
    first_sent: float | None = None
    last_answer: float | None = None


class _Server:
    """A throw-away server as a chaos target: its lock (one step at a time) and whether
    a step has it down."""

    def __init__(self, name: str, server: ServerProcess) -> None:
        self.name, self.server = name, server
        self.lock = asyncio.Lock()
        self.down = False


class _Run:
    def __init__(self, spec: ChaosSpec, workdir: Path) -> None:
        self.spec = spec
        self.data_dir = workdir / "data"
        self.logs = workdir / "logs"
        self.servers: dict[str, _Server] = {}
        self.processes: dict[str, _Process] = {}
        self.tenants: dict[str, _Tenant] = {}
        self.batch_key = ""
        self.ok: dict[str, int] = {}
        """Request id → texts, of every interactive 200."""
        self.errors: set[str] = set()
        self.statuses: Counter[int] = Counter()
        self.no_answer: Counter[str] = Counter()
        """Requests without an answer, by why."""
        self.started = 0.0
        """When the chaos began (``time.monotonic``)."""
        self.sends: list[tuple[float, int | None, float]] = []
        """(sent, seconds after ``started``; status or None; seconds to the answer)."""
        self.steps_done: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.redis_outages = 0
        self.redis_away: list[tuple[float, float]] = []
        """(stopped, started again) in wall-clock time, each time Redis was taken down."""
        self.outbox_left: list[tuple[str, str, int]] = []
        """(kill or restart, gateway, events its outbox held once it was down)."""
        self.gateway_starts_in_outage = 0
        self.stopping = False
        self.session: aiohttp.ClientSession | None = None
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None

    @property
    def postgres(self) -> PostgresServer:
        server = self.servers["postgres"].server
        assert isinstance(server, PostgresServer)
        return server

    @property
    def postgres_url(self) -> str:
        return self.postgres.url_of(DATABASE)

    @property
    def outbox_dir(self) -> Path:
        return self.data_dir / "outbox"

    async def check(self) -> ChaosReport:
        try:
            await self._start()
            return await self._run()
        except Exception as exc:
            exc.add_note(self._tails_text())
            raise
        finally:
            await self._stop_everything()

    # Start and stop ----------------------------------------------------------------------

    async def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        postgres, redis, nats = PostgresServer(fsync=True), RedisServer(), NatsServer()
        for name, server in (("postgres", postgres), ("redis", redis), ("nats", nats)):
            self.servers[name] = _Server(name, server)
            await asyncio.to_thread(server.start)
        await asyncio.to_thread(postgres.psql, f"CREATE DATABASE {DATABASE}")
        await asyncio.to_thread(self._register)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
        env.update(CHILD_ENV)
        env.update(
            {
                "HEADWAY_POSTGRES_URL": self.postgres_url,
                "HEADWAY_REDIS_URL": redis.url,
                "HEADWAY_NATS_URL": nats.url,
                "HEADWAY_STREAMS__MONITOR_URLS": nats.monitor_url,  # its fsync setting, read
                "HEADWAY_BATCHES__EXECUTOR_TOKEN": os.urandom(16).hex(),
            }
        )
        if self.spec.plants:
            env["HEADWAY_TEST_FAULTS"] = json.dumps(list(self.spec.plants))
            env["HEADWAY_TEST_FAULTS_ALLOWED"] = "true"
        data = ["--data-dir", str(self.data_dir)]
        # All started at once (each start opens its port, which the next ones are given),
        # then awaited together: on a busy machine each takes seconds to import.
        for name in WORKERS:
            self._add(name, ["run", "worker", *data, "--backend", "synthetic"], env)
        replicas = ",".join(self.processes[name].url for name in WORKERS)
        self._add("consumer", ["run", "billing", *data], env)
        for name in GATEWAYS:
            args = ["run", "gateway", *data, "--id", name, "--ops-port", "0", "--embed-urls"]
            self._add(name, [*args, replicas], env)
        gateway_urls = ",".join(self.processes[name].url for name in GATEWAYS)
        for name in EXECUTORS:
            self._add(name, ["run", "batches", *data, "--gateway-urls", gateway_urls], env)
        await asyncio.gather(*(self._ready(process) for process in self.processes.values()))
        self.nc, self.js = await connect_nats(
            StreamConfig(servers=(nats.url,), reconnect_wait_s=0.1)
        )

    def _register(self) -> None:
        registry = PostgresRegistry(self.postgres_url)
        try:
            registry.add_model(
                synthetic_record(SyntheticSettings(dimensions=DIMENSIONS)),
                (SYNTHETIC_ALIAS,),
                actor=SYSTEM,
            )
            for name in TENANTS:
                quota = name == QUOTA_TENANT
                rate, burst = (QUOTA_RATE, QUOTA_BURST) if quota else (1e6, 1e6)
                _, key = registry.add_tenant(
                    name, "interactive", actor=SYSTEM, rate_texts_per_s=rate, burst_texts=burst
                )
                rps = QUOTA_OVERLOAD * QUOTA_RATE / TEXTS if quota else self.spec.rate_rps
                self.tenants[name] = _Tenant(name, key, rps)
            _, self.batch_key = registry.add_tenant(
                BATCH_TENANT, "batch", actor=SYSTEM, rate_texts_per_s=1e6, burst_texts=1e6
            )
        finally:
            registry.close()

    def _add(self, name: str, args: list[str], env: Mapping[str, str]) -> None:
        process = _Process(name, args, env, self.logs)
        self.processes[name] = process
        process.expected_down = True  # until it is up
        process.start()

    async def _bring_up(self, process: _Process) -> None:
        """Start it, and wait until it is ready (``_ready``)."""
        process.expected_down = True
        if self.redis_down and process.name in GATEWAYS:
            self.gateway_starts_in_outage += 1
        process.start()
        await self._ready(process)

    async def _ready(self, process: _Process) -> None:
        """Until a started process's /readyz answers 200; one that exits first (a database
        it needs is away) is recorded and started again, until the deadline."""
        assert self.session is not None
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while True:
            code = process.exited
            if code is not None:
                last = (process.tail().strip().splitlines() or [""])[-1]
                self.unexpected.append(
                    f"{process.name} (life {process.lives}) exited at start, status {code}: "
                    + last[:300]
                )
                if time.monotonic() > deadline:
                    raise ServingFailed(f"{process.name} never became ready:\n{process.tail()}")
                await asyncio.sleep(RETRY_START_S)  # a dependency is away: start again soon
                if self.redis_down and process.name in GATEWAYS:
                    self.gateway_starts_in_outage += 1
                process.start()
                continue
            with contextlib.suppress(*_HTTP_ERRORS):
                async with self.session.get(process.url + "/readyz") as answer:
                    if answer.status == 200:
                        process.expected_down = False
                        return
            if time.monotonic() > deadline:
                raise ServingFailed(
                    f"{process.name} not ready in {self.spec.ready_timeout_s:.0f} s:\n"
                    + process.tail()
                )
            await asyncio.sleep(0.1)  # poll interval of the condition wait above

    @property
    def redis_down(self) -> bool:
        redis = self.servers.get("redis")
        return redis is not None and redis.down

    async def _stop_everything(self) -> None:
        self.stopping = True
        for process in self.processes.values():
            process.expected_down = True
            await process.kill()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(*_NATS_ERRORS):
                await self.nc.close()
        if self.session is not None:
            await self.session.close()
        for server in self.servers.values():
            await asyncio.to_thread(server.server.close)

    # The run -----------------------------------------------------------------------------

    async def _run(self) -> ChaosReport:
        loop = asyncio.get_running_loop()
        batch_id, created = await self._create_batch()
        plan = self.spec.steps()
        stop = asyncio.Event()
        started = self.started = loop.time()  # time.monotonic, as the clients read it
        steps = [loop.create_task(self._step(step, started)) for step in plan]
        loads = [loop.create_task(self._tenant_load(t, stop)) for t in self.tenants.values()]
        watch = loop.create_task(self._watch())
        ended = loop.create_task(self._wait_for_batch(batch_id))
        try:
            await asyncio.sleep(self.spec.chaos_s)  # the chaos window: the run itself
            await asyncio.gather(*steps)  # the last steps bring their targets back
            stop.set()
            await asyncio.gather(*loads)
            load_s = loop.time() - started
            settle_started = loop.time()
            batch = await ended
            batch_s = None if batch is None else batch[1] - created
            settled = batch is not None and await self._settle()
            settle_s = loop.time() - settle_started
        finally:
            stop.set()
            for task in (*steps, *loads, watch, ended):
                task.cancel()
            outcomes = await asyncio.gather(*steps, *loads, watch, ended, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, Exception)]
        if failures:
            raise failures[0]
        status = "never ended" if batch is None else str(batch[0]["status"])
        return await self._report(plan, batch, status, batch_s, settled, settle_s, load_s)

    async def _gateway_call(
        self,
        method: str,
        path: str,
        key: str,
        request: Callable[[], Mapping[str, Any]] = dict,
    ) -> tuple[int, bytes]:
        """One call to whichever gateway answers first (one may be down), with retries
        until ``ready_timeout_s``; ``request``: the request's keyword arguments, made anew
        for each try (a form is spent once sent)."""
        assert self.session is not None
        deadline = time.monotonic() + self.spec.ready_timeout_s
        headers = {"authorization": f"Bearer {key}"}
        while True:
            for name in GATEWAYS:
                url = self.processes[name].url + path
                with contextlib.suppress(*_HTTP_ERRORS):
                    async with self.session.request(
                        method, url, headers=headers, **request()
                    ) as answer:
                        body = await answer.read()
                        if answer.status < 500:
                            return answer.status, body
            if time.monotonic() > deadline:
                raise ServingFailed(f"no gateway answered {method} {path}")
            await asyncio.sleep(POLL_S)  # poll interval: a gateway or a store is away

    async def _create_batch(self) -> tuple[str, float]:
        encode = msgspec.json.Encoder().encode
        data = b"".join(
            encode(
                {
                    "custom_id": f"line-{n}",
                    "method": "POST",
                    "url": "/v1/embeddings",
                    "body": {"model": SYNTHETIC_ALIAS, "input": [f"batch line {n}"]},
                }
            )
            + b"\n"
            for n in range(1, self.spec.lines + 1)
        )

        def upload() -> dict[str, Any]:
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", data, filename="chaos.jsonl")
            return {"data": form}

        status, body = await self._gateway_call("POST", "/v1/files", self.batch_key, upload)
        if status != 200:
            raise ServingFailed(f"the batch file upload answered {status}: {body[:300]!r}")
        file_id = msgspec.json.decode(body)["id"]
        create = {
            "input_file_id": file_id,
            "endpoint": "/v1/embeddings",
            "completion_window": "24h",
        }
        status, body = await self._gateway_call(
            "POST", "/v1/batches", self.batch_key, lambda: {"json": create}
        )
        if status != 200:
            raise ServingFailed(f"creating the batch answered {status}: {body[:300]!r}")
        return str(msgspec.json.decode(body)["id"]), time.monotonic()

    async def _tenant_load(self, tenant: _Tenant, stop: asyncio.Event) -> None:
        """Open loop: Poisson arrivals at the tenant's rate, each request its own task,
        alternating between the gateways (``_one``)."""
        rng = random.Random(f"{self.spec.seed}-{tenant.name}")
        timeout = aiohttp.ClientTimeout(total=DEADLINE_MS / 1000 + 3)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            inflight: set[asyncio.Task[None]] = set()
            sent = 0
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), rng.expovariate(tenant.rate_rps))
                if stop.is_set():
                    break
                texts = [
                    f"{tenant.name} {sent} {i} {rng.getrandbits(32):08x}" for i in range(TEXTS)
                ]
                task = asyncio.create_task(self._one(session, sent, tenant, texts))
                sent += 1
                inflight.add(task)
                task.add_done_callback(inflight.discard)
            if inflight:
                await asyncio.gather(*inflight)

    async def _one(
        self, session: aiohttp.ClientSession, first: int, tenant: _Tenant, texts: list[str]
    ) -> None:
        """One request, to gateway ``first`` (modulo) and, if that one refuses the
        connection (it is down), to the next, as a load balancer in front of them would;
        a request that reached a gateway is never sent again."""
        headers = {"authorization": f"Bearer {tenant.key}", "x-timeout-ms": str(DEADLINE_MS)}
        body = {"model": SYNTHETIC_ALIAS, "input": texts}
        sent = time.monotonic()
        if tenant.first_sent is None:
            tenant.first_sent = sent
        status: int | None = None
        request_id = None
        missed = "no gateway reachable"
        for turn in range(len(GATEWAYS)):
            url = self.processes[GATEWAYS[(first + turn) % len(GATEWAYS)]].url
            try:
                async with session.post(
                    url + "/v1/embeddings", json=body, headers=headers
                ) as answer:
                    await answer.read()
                    status, request_id = answer.status, answer.headers.get("x-request-id")
            except aiohttp.ClientConnectorError:
                continue  # not reached: the next gateway
            except TimeoutError:
                missed = "timed out"
            except _HTTP_ERRORS:
                missed = "cut off"  # a gateway killed mid-request
            break
        now = time.monotonic()
        tenant.outcomes.append((status, now - sent))
        self.sends.append((sent - self.started, status, now - sent))
        self.statuses[status or 0] += 1
        if status is None:
            self.no_answer[missed] += 1
        if status is not None:
            tenant.last_answer = now
        if request_id is None:
            return
        if status == 200:
            self.ok[request_id] = len(texts)
        else:
            self.errors.add(request_id)

    # Chaos -------------------------------------------------------------------------------

    async def _step(self, step: ChaosStep, started: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, started + step.at_s - loop.time()))  # the plan's time
        if step.target in self.servers:
            await self._server_step(self.servers[step.target], step)
        else:
            await self._process_step(self.processes[step.target], step)
        self.steps_done[f"{step.action} {step.target}"] += 1

    async def _server_step(self, target: _Server, step: ChaosStep) -> None:
        async with target.lock:
            target.down = True
            if target.name == "redis":
                self.redis_outages += 1
            away = time.time()
            stop = target.server.kill if step.action == "kill" else target.server.stop
            await asyncio.to_thread(stop)
            await asyncio.sleep(step.down_s)  # the chaos: how long it stays down
            await asyncio.to_thread(target.server.start)
            target.down = False
            if target.name == "redis":
                self.redis_away.append((away, time.time()))

    async def _process_step(self, process: _Process, step: ChaosStep) -> None:
        async with process.lock:
            process.expected_down = True
            if step.action == "kill":
                await process.kill()
            else:
                await self._terminate(process)
            if process.name in GATEWAYS:
                depth = await self._outbox_depth(self.outbox_dir / f"{process.name}.sqlite3")
                self.outbox_left.append((step.action, process.name, depth))
            await asyncio.sleep(step.down_s)  # the chaos: how long it stays down
            await self._bring_up(process)

    async def _terminate(self, process: _Process) -> None:
        """SIGTERM, and the exit awaited (a SIGKILL after ``STOP_TIMEOUT_S``)."""
        child = process.process
        if child is None:
            return
        process.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(child.wait, STOP_TIMEOUT_S)
        await process.kill()

    async def _watch(self) -> None:
        """A process that exits on its own is recorded and started again."""
        while True:
            for process in self.processes.values():
                if process.exited is None or process.expected_down or self.stopping:
                    continue
                async with process.lock:
                    if process.expected_down or process.exited is None:
                        continue
                    last = (process.tail().strip().splitlines() or [""])[-1]
                    self.unexpected.append(
                        f"{process.name} (life {process.lives}) exited, status "
                        f"{process.exited}: {last[:300]}"
                    )
                    await self._bring_up(process)
            await asyncio.sleep(0.1)  # poll interval of the exit watch

    # Settle ------------------------------------------------------------------------------

    async def _wait_for_batch(self, batch_id: str) -> tuple[dict[str, object], float] | None:
        """The batch once it has ended, and when that was seen; None at the deadline (the
        chaos and the settle phase)."""
        deadline = time.monotonic() + self.spec.chaos_s + self.spec.settle_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ServingFailed):
                status, body = await self._gateway_call(
                    "GET", f"/v1/batches/{batch_id}", self.batch_key
                )
                if status == 200:
                    batch: dict[str, object] = msgspec.json.decode(body)
                    if batch["status"] in ("completed", "failed", "expired", "cancelled"):
                        return batch, time.monotonic()
            await asyncio.sleep(POLL_S)  # poll interval of the condition wait
        return None

    async def _settle(self) -> bool:
        """Until the outboxes are empty, the usage consumer has nothing pending and the
        ledger's count held over one poll; False at the deadline."""
        deadline = time.monotonic() + self.spec.settle_timeout_s
        previous: int | None = None
        while time.monotonic() < deadline:
            drained = await self._outboxes_empty() and await self._usage_consumed()
            count = await self._ledger_count()
            if drained and count is not None and count == previous:
                return True
            previous = count if drained else None
            await asyncio.sleep(POLL_S)  # poll interval of the condition wait
        return False

    async def _outboxes_empty(self) -> bool:
        for path in sorted(self.outbox_dir.glob("*.sqlite3")):
            if await self._outbox_depth(path):
                return False
        return True

    async def _outbox_depth(self, path: Path) -> int:
        """Events in a gateway's outbox file (it made the file at its first start)."""
        outbox = OutboxFile(path)
        try:
            return await outbox.depth()
        finally:
            await outbox.close()

    async def _usage_consumed(self) -> bool:
        if self.js is None:
            return False
        try:
            info = await self.js.consumer_info(STREAM, DURABLE)
            last = int((await self.js.stream_info(STREAM)).state.last_seq)
        except _NATS_ERRORS:
            return False
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        return not info.num_pending and not info.num_ack_pending and floor == last

    async def _ledger_count(self) -> int | None:
        try:
            conn = await asyncpg.connect(self.postgres_url)
        except (OSError, asyncpg.PostgresError):
            return None
        try:
            count = await conn.fetchval("SELECT count(*) FROM processed_requests")
        finally:
            await conn.close()
        return int(count)

    # The verdict -------------------------------------------------------------------------

    async def _report(
        self,
        plan: Sequence[ChaosStep],
        batch: tuple[dict[str, object], float] | None,
        status: str,
        batch_s: float | None,
        settled: bool,
        settle_s: float,
        load_s: float,
    ) -> ChaosReport:
        rows = await self._ledger_rows()
        ledger = await open_ledger(self.postgres_url, self.data_dir / "unused-ledger.sqlite3")
        try:
            aggregated = sum(row.requests for row in await ledger.hours(0, 2**33, None))
            problems = tuple(await ledger.check_aggregates())
        finally:
            await ledger.close()
        output_ids: list[str] = []
        error_ids: list[str] = []
        answered = dict(self.ok)
        request_ids: dict[str, str] = {}
        if batch is not None:
            batch_id = str(batch[0]["id"])
            request_ids = {
                f"line-{n}": line_request_id(batch_id, n) for n in range(1, self.spec.lines + 1)
            }
            for which, ids in (("output_file_id", output_ids), ("error_file_id", error_ids)):
                file_id = batch[0].get(which)
                if not file_id:
                    continue
                code, body = await self._gateway_call(
                    "GET", f"/v1/files/{file_id}/content", self.batch_key
                )
                if code != 200:
                    raise ServingFailed(f"reading {which} {file_id} answered {code}")
                for line in body.splitlines():
                    decoded = msgspec.json.decode(line)
                    ids.append(str(decoded["custom_id"]))
                    response = decoded.get("response")
                    if which == "output_file_id" and response:
                        answered[str(response["request_id"])] = 1
        billing = billing_verdict(answered, self.errors, rows, aggregated)
        billed = {row.request_id for row in rows if row.billable}
        lines = line_verdict(request_ids, output_ids, error_ids, billed)
        quota = self._quota_verdict(rows)
        deadlines = tuple(
            deadline_share(t.name, t.outcomes, DEADLINE_MS / 1000) for t in self.tenants.values()
        )
        report = ChaosReport(
            spec=self.spec,
            plan=tuple(plan),
            steps_done=dict(self.steps_done),
            unexpected_exits=tuple(self.unexpected),
            settled=settled,
            settle_s=settle_s,
            load_s=load_s,
            batch_status=status,
            batch_s=batch_s,
            billing=billing,
            lines=lines,
            quota=quota,
            deadlines=deadlines,
            timeline=tuple(timeline(self.sends, plan, DEADLINE_MS / 1000, WINDOW_S)),
            statuses=dict(self.statuses),
            no_answer=dict(self.no_answer),
            aggregate_problems=problems,
            outbox_left=tuple(self.outbox_left),
            examples={
                "lost": billing.lost[:5],
                "double billed lines": lines.duplicated[:5],
                "missing lines": lines.missing[:5],
                "unbilled lines": lines.unbilled[:5],
            },
        )
        if report.ok:
            return report
        return replace(report, log_tails=self._tails())

    def _quota_verdict(self, rows: Sequence[LedgerRow]) -> QuotaVerdict:
        tenant = self.tenants[QUOTA_TENANT]
        billed = sum(row.texts for row in rows if row.tenant == QUOTA_TENANT and row.billable)
        served = sum(1 for status, _ in tenant.outcomes if status == 200) * TEXTS
        window_s = 0.0
        if tenant.first_sent is not None and tenant.last_answer is not None:
            window_s = tenant.last_answer - tenant.first_sent
        refused = sum(1 for status, _ in tenant.outcomes if status == 429)
        return quota_verdict(
            QUOTA_TENANT,
            max(billed, served),
            refused,
            QUOTA_RATE,
            QUOTA_BURST,
            window_s,
            self.redis_outages,
            self.gateway_starts_in_outage,
            len(GATEWAYS),
            self._local_while_redis_answered_s(),
        )

    def _local_while_redis_answered_s(self) -> float:
        """The seconds, summed over the gateways, that one limited locally while Redis
        answered: after Redis came back, until its next probe (a pooled connection the
        restart broke can also send it local again)."""
        now = time.time()
        return sum(
            seconds_outside(
                local_periods(_read(self.processes[name].log_path), now), self.redis_away
            )
            for name in GATEWAYS
        )

    async def _ledger_rows(self) -> list[LedgerRow]:
        conn = await asyncpg.connect(self.postgres_url)
        try:
            records = await conn.fetch(
                "SELECT request_id, tenant, billable, texts FROM processed_requests"
            )
        finally:
            await conn.close()
        return [LedgerRow(r[0], r[1], bool(r[2]), int(r[3])) for r in records]

    def _tails(self) -> dict[str, str]:
        tails = {name: process.tail() for name, process in self.processes.items()}
        nats = self.servers.get("nats")
        if nats is not None:
            server = nats.server
            assert isinstance(server, NatsServer)
            tails["nats"] = tail(server.store_dir.parent / "nats.log")
        if "postgres" in self.servers:
            tails["postgres"] = self.postgres.log_tail(3000)
        return tails

    def _tails_text(self) -> str:
        return "\n".join(
            f"--- {name} log (end) ---\n{text}" for name, text in self._tails().items()
        )


__all__ = [
    "GATEWAYS",
    "TARGETS",
    "ChaosReport",
    "ChaosSpec",
    "run_chaos",
]


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
