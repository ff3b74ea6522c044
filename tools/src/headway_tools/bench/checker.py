"""The billing checker: a request answered 200 is billed once, through crashes.

Jepsen-style, on real processes started here (each in its own process group, so one
can be SIGKILLed alone), logs in ``workdir/logs``:

    shared     throw-away Postgres (fsync on) and NATS (JetStream, ``sync_interval:
               always``), one synthetic worker, gateways ``gw-a`` and ``gw-b`` relaying
               their outboxes to JetStream, ``headway run billing`` → Postgres
    embedded   one worker, gateway ``gw-a``, the consumer reading its outbox file
               directly → the SQLite ledger

For ``duration_s``, ``concurrency`` closed-loop clients post embeddings requests of 1-4
distinct texts (spread over the gateways) and record each answer's status and
``X-Request-Id``; a connection error or a timeout is "no answer". Meanwhile the chaos
plan (``chaos_plan``: seeded, spread over the run) SIGKILLs the consumer (every second
time after freezing it with SIGSTOP so that it dies busy on a backlog), a gateway (it
comes back with the same id and data dir, so its outbox is relayed or read after the
restart) and NATS (back on the same port and store), each restarted after a random
pause; and duplicates are injected: copies of stored stream messages published again
WITHOUT ``Nats-Msg-Id`` (JetStream's dedupe window cannot catch them, only the ledger's
primary key can), or, embedded, copies of consumed events inserted back into the
outbox file (a replay). A process that dies on its own is counted as an unexpected
exit and started again, as a supervisor would.

Then the load stops and the checker waits, polling with a deadline, until every outbox
is empty, JetStream's durable consumer has nothing pending and the ledger's count stops
changing; and compares the request ids answered 200 with the ledger:

    lost                 a 200 with no row in ``processed_requests``
    refunded_200         a 200 whose row is not billable
    wrong_texts          a 200 whose row bills another number of texts than were sent
    double_billed        an id with more than one row, plus the requests the hourly
                         aggregates count beyond the billable rows
    aggregate_problems   every aggregate that is not the sum of its billable rows
                         (``check_aggregates``)
    billed_after_error   a billable row for a request answered with an error
    billed_without_200   a billable row for a request never answered (the gateway died
                         after the event was durable, or the client timed out): allowed

``CheckerReport.ok`` holds when all but the last are zero (or empty), the run settled
and nothing exited unexpectedly. ``duplicates_delivered`` shows the injected copies went through
the consumer (acknowledged in JetStream, or removed from the outbox: only the consumer
removes rows there), ``duplicates_seen`` what the consumer's
``headway_billing_events_total{result="duplicate"}`` counted, summed over its lives
(a lower bound: a life's last counts before its SIGKILL may be missed).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext, api

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.open import open_ledger
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.metering.event import LEGACY_SCHEMA, LEGACY_TENANT_ID, UsageEvent, encode
from headway.metering.outbox import OutboxFile
from headway.metering.outbox import connect as connect_outbox
from headway.metering.stream import StreamConfig
from headway.metering.stream import connect as connect_nats
from headway.registry.model import SYSTEM
from headway.registry.postgres import PostgresRegistry
from headway.registry.sqlite import Registry
from headway.registry.store import RegistryStore
from headway.serve import listening_socket
from headway.settings import BillingSettings, SyntheticSettings
from headway_tools.bench.errors import ServingFailed
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.postgres_server import PostgresServer

Mode = Literal["shared", "embedded"]
FaultKind = Literal["consumer", "gateway", "nats"]

TENANT, KEY = "billing-checker", "billing-checker-key"
DIMENSIONS = 16  # the synthetic model's width: small answers
DATABASE = "checker"
STREAM, SUBJECT = BillingSettings().stream, BillingSettings().subject
DURABLE = BillingSettings().consumer
ACK_WAIT_S = 2.0  # the consumer's redelivery after a SIGKILL, instead of 30 s
CHILD_ENV = {
    "HEADWAY_LOG_LEVEL": "info",
    "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "1",
    "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0",
    "HEADWAY_WORKER__SYNTHETIC__DIMENSIONS": str(DIMENSIONS),
    "HEADWAY_BILLING__ACK_WAIT_S": str(ACK_WAIT_S),
}
CHAOS_START, CHAOS_SPAN = 0.1, 0.7
"""Faults fall in [10 %, 80 %] of the run, so each is over (restarted) before the end."""
DOWN_S = (0.2, 1.5)
"""A killed process stays down this long (uniform), then is started again."""
FROZEN_S, BUSY_S = (0.3, 1.0), (0.0, 0.1)
"""A frozen consumer kill: SIGSTOP this long, then SIGCONT and SIGKILL this long after."""
DUPLICATE_TICK_S = (0.2, 0.6)
NO_ANSWER_PAUSE_S = 0.05  # a client pauses after a failed connection (a dead gateway)
POLL_S = 0.5  # the settle and scrape polls' interval
TAIL_CHARS = 3000
_PR_SET_PDEATHSIG = 1
_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)
_HTTP_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
_EVENT_COLUMNS = (
    "request_id, tenant_id, tenant, key_id, endpoint, alias, version, tier, texts, tokens,"
    " outcome,"
    " billable, queue_s, inference_s, total_s, gateway_id, at"
)


@dataclass(frozen=True, slots=True)
class CheckerSpec:
    mode: Mode = "shared"
    duration_s: float = 20.0
    """How long the load runs; the chaos is spread over it."""
    concurrency: int = 16
    """Closed-loop clients, spread over the gateways."""
    consumer_kills: int = 3
    gateway_kills: int = 1
    nats_kills: int | None = None
    """Shared mode only; None: 1 in shared mode, 0 in embedded (``nats_faults``)."""
    duplicates_share: float = 0.05
    """Copies injected, as a share of the events stored so far."""
    seed: int = 0
    client_timeout_s: float = 5.0
    ready_timeout_s: float = 60.0
    settle_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.mode not in ("shared", "embedded"):
            raise ValueError(f"mode must be shared or embedded, not {self.mode!r}")
        if self.mode == "embedded" and self.nats_kills:
            raise ValueError("embedded mode has no NATS to kill")
        if min(self.consumer_kills, self.gateway_kills, self.nats_faults) < 0:
            raise ValueError("kills cannot be negative")
        if self.duration_s <= 0 or self.concurrency <= 0:
            raise ValueError("duration_s and concurrency must be positive")
        if not 0 <= self.duplicates_share <= 1:
            raise ValueError("duplicates_share is a share, in [0, 1]")

    @property
    def nats_faults(self) -> int:
        if self.nats_kills is not None:
            return self.nats_kills
        return 1 if self.mode == "shared" else 0

    @property
    def gateways(self) -> tuple[str, ...]:
        return ("gw-a", "gw-b") if self.mode == "shared" else ("gw-a",)


@dataclass(frozen=True, slots=True)
class CheckerReport:
    mode: Mode
    seed: int
    duration_s: float
    """How long the load ran."""
    settle_s: float
    """From the end of the load until the ledger held everything (or the deadline)."""
    settled: bool
    events_answered_200: int
    answered_other: int
    """Answers with another status (``statuses`` has them all)."""
    no_answer: int
    statuses: Mapping[int, int]
    error_types: Mapping[str, int]
    """The other answers by status and error type (``"503 overloaded"``)."""
    billed: int
    """Rows in ``processed_requests`` (billable or refunded)."""
    billable: int
    aggregated_requests: int
    """Requests the hourly aggregates count (invoices read these): ``billable`` if right."""
    lost: int
    refunded_200: int
    wrong_texts: int
    double_billed: int
    """Request ids with more than one row, plus requests the aggregates count beyond the
    billable rows (an event aggregated twice)."""
    billed_after_error: int
    billed_without_200: int
    aggregate_problems: Sequence[str]
    kills_by_kind: Mapping[str, int]
    outbox_left_at_gateway_kills: Sequence[int]
    """Events each killed gateway left in its outbox (relayed or read after its restart)."""
    unexpected_exits: Sequence[str]
    duplicates_injected: int
    duplicates_delivered: int
    duplicates_seen: int
    stream_messages: int | None
    """Shared mode: messages the stream holds (each event once, plus the copies injected,
    plus any re-publish JetStream did not drop)."""
    examples: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """A few request ids of each kind of problem."""
    log_tails: Mapping[str, str] = field(default_factory=dict)
    """The end of each process's log, when the run is not ``ok``."""

    @property
    def ok(self) -> bool:
        return (
            self.settled
            and not self.lost
            and not self.refunded_200
            and not self.wrong_texts
            and not self.double_billed
            and not self.billed_after_error
            and not self.aggregate_problems
            and not self.unexpected_exits
        )

    @property
    def events(self) -> int:
        """Requests answered 200: the events the run had to bill."""
        return self.events_answered_200

    @property
    def kills(self) -> int:
        return sum(self.kills_by_kind.values())

    def describe(self, *, tails: bool = True) -> str:
        kills = ", ".join(f"{kind} {count}" for kind, count in sorted(self.kills_by_kind.items()))
        lines = [
            f"billing checker, {self.mode} mode, seed {self.seed}: "
            + ("OK" if self.ok else "FAILED"),
            f"  load {self.duration_s:.1f} s: {self.events_answered_200} answered 200, "
            f"{self.answered_other} other ({dict(sorted(self.error_types.items()))}), "
            f"{self.no_answer} no answer",
            f"  kills: {kills or 'none'}; events left in killed gateways' outboxes: "
            f"{list(self.outbox_left_at_gateway_kills)}; unexpected exits: "
            f"{len(self.unexpected_exits)}",
            f"  duplicates: {self.duplicates_injected} injected, "
            f"{self.duplicates_delivered} through the consumer, "
            f"{self.duplicates_seen} counted duplicate by it",
            f"  settled: {self.settled} after {self.settle_s:.1f} s; ledger rows "
            f"{self.billed} ({self.billable} billable, aggregates count "
            f"{self.aggregated_requests})"
            + (f"; stream messages {self.stream_messages}" if self.stream_messages else ""),
            f"  lost {self.lost}, double billed {self.double_billed}, refunded 200s "
            f"{self.refunded_200}, wrong texts {self.wrong_texts}, billed after an error "
            f"{self.billed_after_error}, billed without a 200 {self.billed_without_200}",
        ]
        lines += [f"  aggregate: {problem}" for problem in self.aggregate_problems[:10]]
        lines += [f"  unexpected exit: {exit_}" for exit_ in self.unexpected_exits]
        lines += [f"  {kind}: {', '.join(ids)}" for kind, ids in self.examples.items() if ids]
        if tails:
            for name, tail in self.log_tails.items():
                lines.append(f"--- {name} log (end) ---\n{tail}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True, order=True)
class Fault:
    at_s: float
    """Seconds after the load starts."""
    kind: FaultKind
    target: str
    """The process: ``consumer``, a gateway id, ``nats``."""
    down_s: float
    """Dead this long before it is started again."""
    frozen_s: float = 0.0
    """SIGSTOPped this long first, then let run ``busy_s`` before the SIGKILL: the
    consumer dies busy on the backlog (in the middle of big batches), not idle."""
    busy_s: float = 0.0


def chaos_plan(spec: CheckerSpec) -> list[Fault]:
    """The faults of a run, a pure function of the spec: each kind's kills spread over
    ``[CHAOS_START, CHAOS_START + CHAOS_SPAN]`` of the run, one per equal slot, at a
    seeded random place in it; every second consumer kill is frozen first (``Fault``)."""
    rng = random.Random(spec.seed)
    faults: list[Fault] = []
    kinds: list[tuple[FaultKind, int, Sequence[str]]] = [
        ("consumer", spec.consumer_kills, ("consumer",)),
        ("gateway", spec.gateway_kills, spec.gateways),
        ("nats", spec.nats_faults, ("nats",)),
    ]
    for kind, count, targets in kinds:
        for slot in range(count):
            share = CHAOS_START + CHAOS_SPAN * (slot + rng.random()) / count
            target, down_s = rng.choice(targets), rng.uniform(*DOWN_S)
            frozen_s, busy_s = rng.uniform(*FROZEN_S), rng.uniform(*BUSY_S)
            if kind != "consumer" or slot % 2 == 0:
                frozen_s = busy_s = 0.0
            faults.append(Fault(spec.duration_s * share, kind, target, down_s, frozen_s, busy_s))
    return sorted(faults)


def run_checker(spec: CheckerSpec, workdir: Path) -> CheckerReport:
    """Run the whole check (minutes at most); every process it started is gone when it
    returns or raises. ``ServingFailed`` if the system could not be started."""
    run = _Run(spec, workdir)
    if run.data_dir.exists():
        raise FileExistsError(f"{run.data_dir} exists: give each run a fresh workdir")
    return asyncio.run(run.check())


# Processes ------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - chars))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


class _Process:
    """One ``headway`` command on a socket opened here (the same address at every start),
    in its own process group, logging to ``logs/<name>.log``."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], logs: Path) -> None:
        self.name = name
        self._args = args
        self._env = env
        self.log_path = logs / f"{name}.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.lives = 0
        """Starts so far: the current life's number."""
        self.expected_down = False
        """Killed on purpose (the chaos, or the end): not an unexpected exit."""
        self.lock = asyncio.Lock()
        """Held by whoever kills or restarts it."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def start(self) -> None:
        """From the event loop's thread (the child dies with that thread)."""
        sock = listening_socket("127.0.0.1", self.port)
        self.port = sock.getsockname()[1]
        command = [sys.executable, "-m", "headway", *self._args, "--fd", str(sock.fileno())]
        try:
            with self.log_path.open("ab") as log:
                log.write(f"=== {time.strftime('%H:%M:%S')} start {self.lives + 1} ===\n".encode())
                log.flush()
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(sock.fileno(),),
                    env=dict(self._env),
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
        finally:
            sock.close()
        self.lives += 1

    def signal(self, signum: signal.Signals) -> None:
        """To its whole group, if it is alive."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)

    async def kill(self) -> None:
        """SIGKILL to its whole group, and reap it."""
        process = self.process
        if process is not None:
            self.signal(signal.SIGKILL)
            await asyncio.to_thread(process.wait)

    def tail(self) -> str:
        return tail(self.log_path)


# The run --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Answers:
    ok: dict[str, int] = field(default_factory=dict)
    """Request id → texts sent, of every 200."""
    other: dict[str, int] = field(default_factory=dict)
    """Request id → status, of every other answer."""
    statuses: Counter[int] = field(default_factory=Counter)
    error_types: Counter[str] = field(default_factory=Counter)
    """``"503 overloaded"``: status and error type of the other answers."""
    no_answer: int = 0


class _Run:
    def __init__(self, spec: CheckerSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.logs = workdir / "logs"
        self.postgres: PostgresServer | None = None
        self.nats_server: NatsServer | None = None
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self.processes: dict[str, _Process] = {}
        self.answers = _Answers()
        self.kills: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.stopping = False
        self.injected_seqs: list[int] = []
        """Shared mode: stream sequences of the copies injected."""
        self.injected_rows: list[int] = []
        """Embedded mode: outbox row ids of the copies injected."""
        self.ledger_rows_read = 0
        """Embedded mode: the ledger's rowid up to which copies have been sampled."""
        self.duplicates_seen: dict[int, float] = {}
        """The consumer's duplicate count, by life (the highest scraped)."""
        self.session: aiohttp.ClientSession | None = None
        """For /readyz and /metrics (the load has its own)."""
        self.left_at_gateway_kills: list[int] = []
        """Events in a killed gateway's outbox right after its SIGKILL."""
        self.nats_lock = asyncio.Lock()
        """Held by a NATS fault: one outage at a time."""

    @property
    def shared(self) -> bool:
        return self.spec.mode == "shared"

    @property
    def postgres_url(self) -> str | None:
        return self.postgres.url_of(DATABASE) if self.postgres is not None else None

    @property
    def ledger_path(self) -> Path:
        return self.data_dir / "ledger.sqlite3"

    @property
    def outbox_dir(self) -> Path:
        return self.data_dir / "outbox"

    async def check(self) -> CheckerReport:
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
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
        if self.shared:
            self.postgres = PostgresServer(fsync=True)
            await asyncio.to_thread(self.postgres.start)
            await asyncio.to_thread(self.postgres.psql, f"CREATE DATABASE {DATABASE}")
            self.nats_server = NatsServer()
            await asyncio.to_thread(self.nats_server.start)
        # Shared mode: the registry is on the Postgres too, for every process.
        registry: RegistryStore = (
            Registry(self.data_dir / "registry.sqlite3")
            if self.postgres_url is None
            else PostgresRegistry(self.postgres_url)
        )
        with contextlib.closing(registry):
            registry.add_tenant(
                TENANT, "interactive", actor=SYSTEM, rate_texts_per_s=1e9, burst_texts=1e9, key=KEY
            )
            registry.add_model(
                synthetic_record(SyntheticSettings(dimensions=DIMENSIONS)),
                (SYNTHETIC_ALIAS,),
                actor=SYSTEM,
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
        env.update(CHILD_ENV)
        if self.postgres_url is not None:
            env["HEADWAY_POSTGRES_URL"] = self.postgres_url
        if self.nats_server is not None:  # where start-up reads NATS's fsync setting
            env["HEADWAY_STREAMS__MONITOR_URLS"] = self.nats_server.monitor_url
        shared_args: list[str] = []
        if self.nats_server is not None and self.postgres_url is not None:
            shared_args = ["--nats-url", self.nats_server.url, "--postgres-url", self.postgres_url]
        data = ["--data-dir", str(self.data_dir)]
        worker = _Process(
            "worker", ["run", "worker", *data, "--backend", "synthetic"], env, self.logs
        )
        self.processes["worker"] = worker
        worker.start()
        consumer = _Process("consumer", ["run", "billing", *data, *shared_args], env, self.logs)
        self.processes["consumer"] = consumer
        consumer.start()
        await self._ready(worker)
        for gateway_id in self.spec.gateways:
            # Its /metrics on a free port (not read here): the default would collide.
            args = ["run", "gateway", *data, "--id", gateway_id, "--ops-port", "0"]
            args += ["--embed-replicas", worker.url]
            gateway = _Process(gateway_id, [*args, *shared_args], env, self.logs)
            self.processes[gateway_id] = gateway
            gateway.start()
        for process in self.processes.values():
            await self._ready(process)
        if self.nats_server is not None:
            self.nc, self.js = await connect_nats(
                StreamConfig(servers=(self.nats_server.url,), reconnect_wait_s=0.1)
            )

    async def _ready(self, process: _Process) -> None:
        """Until its /readyz answers 200; ``ServingFailed`` if it exits or the deadline
        passes first."""
        assert self.session is not None
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while True:
            if process.exited is not None:
                raise ServingFailed(
                    f"{process.name} exited with status {process.exited} before it was "
                    f"ready:\n{process.tail()}"
                )
            with contextlib.suppress(*_HTTP_ERRORS):
                async with self.session.get(process.url + "/readyz") as answer:
                    if answer.status == 200:
                        return
            if time.monotonic() > deadline:
                raise ServingFailed(
                    f"{process.name} not ready in {self.spec.ready_timeout_s:.0f} s:\n"
                    + process.tail()
                )
            await asyncio.sleep(0.05)  # poll interval of the condition wait above

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
        if self.nats_server is not None:
            await asyncio.to_thread(self.nats_server.close)
        if self.postgres is not None:
            await asyncio.to_thread(self.postgres.close)

    # The run -----------------------------------------------------------------------------

    async def _run(self) -> CheckerReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = loop.time()
        faults = [
            loop.create_task(self._fault(fault, started), name=f"fault {fault}")
            for fault in chaos_plan(self.spec)
        ]
        duplicates = loop.create_task(self._duplicates_loop(stop), name="duplicates")
        tasks = [
            *faults,
            duplicates,
            loop.create_task(self._watch(), name="watch"),
            loop.create_task(self._scrape_loop(), name="scrape"),
        ]
        try:
            duration_s = await self._load(stop)
            await asyncio.gather(duplicates, *faults)  # it ends with the load
            ended = loop.time()
            ledger = await open_ledger(self.postgres_url, self.ledger_path)
            try:
                settled = await self._settle(ledger)
                settle_s = loop.time() - ended
                await self._scrape()
                report = await self._report(ledger, duration_s, settle_s, settled)
            finally:
                await ledger.close()
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
        if failures:  # a background task failed (a restart that never became ready)
            raise failures[0]
        return report

    async def _load(self, stop: asyncio.Event) -> float:
        """The clients, for ``duration_s``; how long they ran (the last answers included)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=self.spec.client_timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as clients:
            load = [
                loop.create_task(self._client(index, clients, stop), name=f"client {index}")
                for index in range(self.spec.concurrency)
            ]
            try:
                await asyncio.sleep(self.spec.duration_s)  # the load's length: the run itself
            finally:
                stop.set()
                await asyncio.gather(*load)
        return loop.time() - started

    async def _client(
        self, index: int, session: aiohttp.ClientSession, stop: asyncio.Event
    ) -> None:
        rng = random.Random(f"{self.spec.seed}-client-{index}")
        gateways = self.spec.gateways
        gateway = self.processes[gateways[index % len(gateways)]]
        headers = {"authorization": f"Bearer {KEY}"}
        answers = self.answers
        sent = 0
        while not stop.is_set():
            texts = [
                f"client {index} request {sent} text {n} {rng.getrandbits(32):08x}"
                for n in range(rng.randint(1, 4))
            ]
            sent += 1
            body = {"model": SYNTHETIC_ALIAS, "input": texts}
            try:
                async with session.post(
                    gateway.url + "/v1/embeddings", json=body, headers=headers
                ) as answer:
                    body_bytes = await answer.read()
                    status, request_id = answer.status, answer.headers.get("x-request-id")
            except _HTTP_ERRORS:
                answers.no_answer += 1
                await asyncio.sleep(NO_ANSWER_PAUSE_S)  # a dead gateway refuses at once
                continue
            answers.statuses[status] += 1
            if request_id is None:
                continue
            if status == 200:
                answers.ok[request_id] = len(texts)
            else:
                answers.other[request_id] = status
                answers.error_types[f"{status} {error_type(body_bytes)}"] += 1

    # Chaos -------------------------------------------------------------------------------

    async def _fault(self, fault: Fault, started: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, started + fault.at_s - loop.time()))  # the plan's time
        if fault.kind == "nats":
            server = self.nats_server
            assert server is not None
            async with self.nats_lock:
                await asyncio.to_thread(server.kill)
                self.kills["nats"] += 1
                await asyncio.sleep(fault.down_s)  # the chaos: how long it stays down
                await asyncio.to_thread(server.start)
            return
        process = self.processes[fault.target]
        async with process.lock:
            process.expected_down = True
            if fault.kind == "consumer":
                await self._scrape()  # this life's last counts, as late as possible
            if fault.frozen_s:
                process.signal(signal.SIGSTOP)
                await asyncio.sleep(fault.frozen_s)  # the chaos: a backlog builds
                process.signal(signal.SIGCONT)
                await asyncio.sleep(fault.busy_s)  # the chaos: it works on the backlog
            await process.kill()
            self.kills[fault.kind] += 1
            if fault.kind == "gateway":
                self.left_at_gateway_kills.append(await self._outbox_depth(fault.target))
            await asyncio.sleep(fault.down_s)  # the chaos: how long it stays down
            process.start()
            await self._ready(process)
            process.expected_down = False

    async def _watch(self) -> None:
        """Every process that exits on its own is recorded and started again."""
        while True:
            for process in self.processes.values():
                code = process.exited
                if code is None or process.expected_down or self.stopping:
                    continue
                async with process.lock:
                    if process.expected_down or process.exited is None:
                        continue
                    last_line = (process.tail().strip().splitlines() or [""])[-1]
                    self.unexpected.append(
                        f"{process.name} (life {process.lives}) exited with status {code}: "
                        + last_line
                    )
                    process.start()
                    await self._ready(process)
            await asyncio.sleep(0.1)  # poll interval of the exit watch

    # Duplicates --------------------------------------------------------------------------

    async def _duplicates_loop(self, stop: asyncio.Event) -> None:
        rng = random.Random(f"{self.spec.seed}-duplicates")
        while not stop.is_set() and self.spec.duplicates_share > 0:
            await asyncio.sleep(rng.uniform(*DUPLICATE_TICK_S))  # the chaos' rhythm
            if stop.is_set():
                return
            if self.shared:
                with contextlib.suppress(*_NATS_ERRORS):  # NATS is down: next tick
                    await self._duplicate_stream_messages(rng)
            else:
                await asyncio.to_thread(self._duplicate_outbox_rows, rng)

    async def _duplicate_stream_messages(self, rng: random.Random) -> None:
        """Copies of stored events, published without ``Nats-Msg-Id``, up to the share of
        the originals stored so far."""
        js = self.js
        assert js is not None
        info = await js.stream_info(STREAM)
        last = int(info.state.last_seq)
        originals = last - len(self.injected_seqs)
        wanted = int(self.spec.duplicates_share * originals) - len(self.injected_seqs)
        copied = set(self.injected_seqs)
        for _ in range(max(0, 4 * wanted)):  # some draws hit copies: a few tries more
            if wanted <= 0:
                return
            seq = rng.randint(1, last)
            if seq in copied:
                continue
            message = await js.get_msg(STREAM, seq)
            if not message.headers or api.Header.MSG_ID.value not in message.headers:
                continue  # a copy itself
            assert message.data is not None
            ack = await js.publish(SUBJECT, message.data, stream=STREAM)
            self.injected_seqs.append(ack.seq)
            copied.add(ack.seq)
            wanted -= 1

    def _duplicate_outbox_rows(self, rng: random.Random) -> None:
        """Copies of events already in the ledger (so consumed and removed from the
        outbox), inserted back into the gateway's outbox file, as a replay would."""
        if not self.ledger_path.exists():
            return
        last_row = self.ledger_rows_read
        with contextlib.closing(sqlite3.connect(self.ledger_path, timeout=10)) as ledger:
            rows = ledger.execute(
                f"SELECT rowid, {_EVENT_COLUMNS} FROM processed_requests WHERE rowid > ?"
                " ORDER BY rowid",
                (last_row,),
            ).fetchall()
        if not rows:
            return
        self.ledger_rows_read = rows[-1][0]
        chosen = [_event_of(row[1:]) for row in rows if rng.random() < self.spec.duplicates_share]
        if not chosen:
            return
        outbox = self.outbox_dir / f"{self.spec.gateways[0]}.sqlite3"
        conn = connect_outbox(outbox, create=False, busy_timeout_s=10.0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            ids = [
                conn.execute(
                    "INSERT INTO outbox (request_id, data, created_at) VALUES (?, ?, ?)",
                    (event.request_id, encode(event), time.time()),
                ).lastrowid
                for event in chosen
            ]
            conn.execute("COMMIT")
        finally:
            conn.close()
        self.injected_rows += [row_id for row_id in ids if row_id is not None]

    # The consumer's counts ---------------------------------------------------------------

    async def _scrape_loop(self) -> None:
        while True:
            await self._scrape()
            await asyncio.sleep(POLL_S)  # the scrape's interval

    async def _scrape(self) -> None:
        process = self.processes.get("consumer")
        if process is None or self.session is None:
            return
        life = process.lives
        try:
            async with self.session.get(process.url + "/metrics") as answer:
                text = await answer.text()
        except _HTTP_ERRORS:
            return
        count = metric_value(text, 'headway_billing_events_total{result="duplicate"}')
        if count is not None and life == process.lives:
            self.duplicates_seen[life] = max(count, self.duplicates_seen.get(life, 0.0))

    # Settle and compare ------------------------------------------------------------------

    async def _settle(self, ledger: Ledger) -> bool:
        """Until the outboxes are empty, JetStream has nothing pending for the consumer
        and the ledger's count has not changed over one poll; False at the deadline."""
        deadline = time.monotonic() + self.spec.settle_timeout_s
        previous: int | None = None
        while time.monotonic() < deadline:
            drained = await self._outboxes_empty() and await self._stream_consumed()
            processed = (await ledger.counts())["processed"]
            if drained and processed == previous:
                return True
            previous = processed if drained else None
            await asyncio.sleep(POLL_S)  # poll interval of the condition wait above
        return False

    async def _outboxes_empty(self) -> bool:
        for path in sorted(self.outbox_dir.glob("*.sqlite3")):
            if await self._outbox_depth(path.stem):
                return False
        return True

    async def _outbox_depth(self, gateway_id: str) -> int:
        outbox = OutboxFile(self.outbox_dir / f"{gateway_id}.sqlite3")
        try:
            return await outbox.depth()
        finally:
            await outbox.close()

    async def _stream_consumed(self) -> bool:
        info = await self._consumer_info()
        if info is None:
            return not self.shared
        try:
            stream_last = int((await self._stream_info()).state.last_seq)
        except _NATS_ERRORS:
            return False
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        return not info.num_pending and not info.num_ack_pending and floor == stream_last

    async def _consumer_info(self) -> api.ConsumerInfo | None:
        if self.js is None:
            return None
        try:
            info: api.ConsumerInfo = await self.js.consumer_info(STREAM, DURABLE)
        except _NATS_ERRORS:
            return None
        return info

    async def _stream_info(self) -> api.StreamInfo:
        assert self.js is not None
        return await self.js.stream_info(STREAM)

    async def _report(
        self, ledger: Ledger, duration_s: float, settle_s: float, settled: bool
    ) -> CheckerReport:
        ids = await ledger.processed_ids()
        rows = await self._ledger_rows()
        problems = await ledger.check_aggregates()
        ok, other = self.answers.ok, self.answers.other
        examples: dict[str, list[str]] = {}

        def kind(name: str, found: Sequence[str]) -> int:
            examples[name] = sorted(found)[:5]
            return len(found)

        lost = kind("lost", [i for i in ok if i not in rows])
        refunded = kind("refunded 200", [i for i in ok if i in rows and not rows[i][0]])
        wrong = kind("wrong texts", [i for i in ok if i in rows and rows[i][1] != ok[i]])
        double = kind("double billed", [i for i, count in ids.items() if count > 1])
        aggregated = sum(row.requests for row in await ledger.hours(0, 2**33, None))
        billable = sum(1 for is_billable, _ in rows.values() if is_billable)
        after_error = kind(
            "billed after an error", [i for i in other if rows.get(i, (False, 0))[0]]
        )
        without = [i for i, row in rows.items() if row[0] and i not in ok and i not in other]
        delivered, stream_messages = await self._duplicates_delivered()
        report = CheckerReport(
            mode=self.spec.mode,
            seed=self.spec.seed,
            duration_s=duration_s,
            settle_s=settle_s,
            settled=settled,
            events_answered_200=len(ok),
            answered_other=sum(c for s, c in self.answers.statuses.items() if s != 200),
            no_answer=self.answers.no_answer,
            statuses=dict(self.answers.statuses),
            error_types=dict(self.answers.error_types),
            billed=len(rows),
            billable=billable,
            aggregated_requests=aggregated,
            lost=lost,
            refunded_200=refunded,
            wrong_texts=wrong,
            double_billed=double + max(0, aggregated - billable),
            billed_after_error=after_error,
            billed_without_200=len(without),
            aggregate_problems=problems,
            kills_by_kind=dict(self.kills),
            outbox_left_at_gateway_kills=list(self.left_at_gateway_kills),
            unexpected_exits=list(self.unexpected),
            duplicates_injected=len(self.injected_seqs) + len(self.injected_rows),
            duplicates_delivered=delivered,
            duplicates_seen=int(sum(self.duplicates_seen.values())),
            stream_messages=stream_messages,
            examples=examples,
        )
        return report if report.ok else replace(report, log_tails=self._tails())

    async def _ledger_rows(self) -> dict[str, tuple[bool, int]]:
        """Request id → (billable, texts) of every row of ``processed_requests``."""
        query = "SELECT request_id, billable, texts FROM processed_requests"
        if self.postgres_url is not None:
            import asyncpg

            conn = await asyncpg.connect(self.postgres_url)
            try:
                records = await conn.fetch(query)
            finally:
                await conn.close()
            return {r[0]: (bool(r[1]), int(r[2])) for r in records}

        def read() -> dict[str, tuple[bool, int]]:
            with contextlib.closing(sqlite3.connect(self.ledger_path, timeout=10)) as db:
                return {r[0]: (bool(r[1]), int(r[2])) for r in db.execute(query)}

        return await asyncio.to_thread(read)

    async def _duplicates_delivered(self) -> tuple[int, int | None]:
        """Copies that went through the consumer, and (shared) the stream's message count."""
        if not self.shared:
            if not self.injected_rows:
                return 0, None
            outbox = self.outbox_dir / f"{self.spec.gateways[0]}.sqlite3"
            with contextlib.closing(sqlite3.connect(outbox, timeout=10)) as db:
                marks = ",".join("?" * len(self.injected_rows))
                (left,) = db.execute(
                    f"SELECT count(*) FROM outbox WHERE id IN ({marks})", self.injected_rows
                ).fetchone()
            return len(self.injected_rows) - int(left), None
        info = await self._consumer_info()
        messages = int((await self._stream_info()).state.messages)
        if info is None or info.ack_floor is None or info.num_ack_pending:
            return 0, messages
        floor = info.ack_floor.stream_seq or 0
        return sum(1 for seq in self.injected_seqs if seq <= floor), messages

    def _tails(self) -> dict[str, str]:
        tails = {name: process.tail() for name, process in self.processes.items()}
        if self.nats_server is not None:
            tails["nats"] = tail(self.nats_server.store_dir.parent / "nats.log")
        if self.postgres is not None:
            tails["postgres"] = self.postgres.log_tail(TAIL_CHARS)
        return tails

    def _tails_text(self) -> str:
        return "\n".join(
            f"--- {name} log (end) ---\n{text}" for name, text in self._tails().items()
        )


def metric_value(exposition: str, series: str) -> float | None:
    """The value of one series (name and labels exactly as exposed) in Prometheus text."""
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def error_type(body: bytes) -> str:
    """The ``error.type`` of an error answer's JSON body, or ``?``."""
    try:
        decoded = json.loads(body)
        return str(decoded["error"]["type"])
    except (ValueError, TypeError, KeyError):
        return "?"


def _event_of(row: Sequence[Any]) -> UsageEvent:
    """A ledger row (``_EVENT_COLUMNS``) as the event it was written from."""
    names = [name.strip() for name in _EVENT_COLUMNS.split(",")]
    fields: dict[str, Any] = dict(zip(names, row, strict=True))
    fields["billable"] = bool(fields["billable"])
    if fields["tenant_id"] == LEGACY_TENANT_ID:
        fields["schema"] = LEGACY_SCHEMA
    return UsageEvent(**fields)


__all__ = [
    "CheckerReport",
    "CheckerSpec",
    "Fault",
    "chaos_plan",
    "error_type",
    "metric_value",
    "run_checker",
]
