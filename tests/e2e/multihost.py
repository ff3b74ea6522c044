"""A headway cluster on hosts in network namespaces (``headway_tools.testing.netns``), for
``test_multihost.py``.

    client   the open-loop load generator and every probe of the test
    gw       headway gateway :8080, headway billing run :9300, PostgreSQL :5432 (the
             registry and the ledger)
    w1, w2   headway worker --backend synthetic :9100, each with its own data dir
    redis    redis-server :6379 (quotas; the results cache's shared tier)
    nats     nats-server :4222, JetStream (usage events)
    dns      dnsmasq :53, answering embed.headway.test with the workers' A records

headway's processes are started with ``ip netns exec`` and log to ``logs/<name>.log``;
the throw-away servers (``headway_tools.testing``) are started from a thread inside their
host. The test process itself is on none of these networks: it talks to them from the
client host (``Cluster.get``, ``Cluster.load``) or, for PostgreSQL, from the gateway's.
The servers listen on their standard ports, on their hosts' addresses: whatever the
machine itself runs on those ports is neither seen nor disturbed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.exception
import dns.resolver
import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from headway.catalog import ensure_default_model
from headway.quantile import quantile
from headway.registry.demo import DEMO_ADMIN_KEY
from headway.registry.open import open_registry
from headway.registry.postgres import PostgresRegistry
from headway.settings import load_settings
from headway_tools.loadgen import LoadResult, Outcome, Records, run_load_sync, spec_from_args
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.netns import Host, Network
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.redis_server import RedisServer
from tests.e2e.conftest import wait_for

EMBED_NAME = "embed.headway.test"
GATEWAY_PORT, GATEWAY_OPS_PORT, BILLING_PORT, WORKER_PORT = 8080, 9200, 9300, 9100
POSTGRES_PORT, REDIS_PORT, NATS_PORT, DNS_PORT = 5432, 6379, 4222, 53
DATABASE = "headway"
ADMIN = {"authorization": f"Bearer {DEMO_ADMIN_KEY}"}
HEADWAY = (sys.executable, "-m", "headway")
START_TIMEOUT_S = 90.0
TAIL_CHARS = 3000
WEIGHTS_TOKEN = "netns-worker-credential"  # what workers present to the gateway's store

# Every headway process gets these (each reads its own sections): fast discovery and
# health polls, so a cut is seen within a poll's timeout (2 x 0.25 s); hedging on the
# embed pool, so a chunk caught on a replica that went silent is answered by another.
CHILD_ENV = {
    "HEADWAY_LOG_LEVEL": "info",
    "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "2",
    "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0.5",
    "HEADWAY_WORKER__REGISTRY_POLL_S": "0.5",
    "HEADWAY_WORKER__DRAIN_DELAY_S": "0",
    "HEADWAY_GATEWAY__DNS_INTERVAL_S": "0.5",
    "HEADWAY_GATEWAY__HEALTH_INTERVAL_S": "0.25",
    "HEADWAY_GATEWAY__REGISTRY_POLL_S": "0.2",
    "HEADWAY_GATEWAY__ROUTING__HEDGE_POOLS": '["embed"]',
    "HEADWAY_GATEWAY__QUOTA__HEARTBEAT_S": "0.5",
    "HEADWAY_GATEWAY__QUOTA__PROBE_INTERVAL_S": "0.25",
}


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    key: str
    rate_texts_per_s: float = 1e6
    burst_texts: float = 1e6


# One tenant per scenario, so each one's answers and ledger rows are its own.
TENANTS = (
    Tenant("netns-partition", "netns-key-partition"),
    Tenant("netns-quota", "netns-key-quota", rate_texts_per_s=2000, burst_texts=4000),
    Tenant("netns-billing", "netns-key-billing"),
    Tenant("netns-weights", "netns-key-weights"),
)


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class Dnsmasq:
    """dnsmasq on the dns host's port 53, answering from a hosts file it re-reads on SIGHUP."""

    def __init__(self, host: Host, workdir: Path, log: Path) -> None:
        dnsmasq = shutil.which("dnsmasq", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        assert dnsmasq, "dnsmasq is missing (scripts/test-prerequisites installs dnsmasq-base)"
        self.address = host.address
        self.hosts = workdir / "dns-hosts"
        self.hosts.write_text("")
        argv = [
            dnsmasq,
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            f"--addn-hosts={self.hosts}",
            f"--port={DNS_PORT}",
            f"--listen-address={host.address}",
            "--bind-interfaces",
            "--cache-size=0",
            "--local-ttl=0",
            f"--pid-file={workdir / 'dnsmasq.pid'}",
            "--user=root",
        ]
        with log.open("ab") as out:
            self.process = host.run(argv, stdout=out, stderr=subprocess.STDOUT)

    def serve(self, addresses: list[str]) -> None:
        self.hosts.write_text("".join(f"{address} {EMBED_NAME}\n" for address in addresses))
        self.process.send_signal(signal.SIGHUP)

    def answer(self) -> list[str] | None:
        """The A records it gives for the embed name now (from wherever this runs)."""
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers, resolver.port, resolver.lifetime = [self.address], DNS_PORT, 0.5
        try:
            return sorted(r.address for r in resolver.resolve(EMBED_NAME, "A"))
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
            return []  # an answer, if not an address (with no name, dnsmasq refuses)
        except dns.exception.Timeout:
            return None


@dataclass
class Timed:
    """A load run and when, on this process's ``perf_counter``, its schedule began."""

    result: LoadResult
    start: float
    marks: dict[str, float] = field(default_factory=dict)
    """Moments the test acted at (a cut, a heal), as offsets into the run (s)."""

    @property
    def records(self) -> Records:
        return self.result.records


class BackgroundLoad:
    """An open-loop run on the client host while the test acts (``at``, ``mark``)."""

    def __init__(self, future: Future[tuple[LoadResult, float]]) -> None:
        self._future = future
        self._submitted = time.perf_counter()
        self._marks: dict[str, float] = {}

    def at(self, offset_s: float) -> None:
        """Until ``offset_s`` after the run was asked for: the experiment's schedule."""
        time.sleep(max(0.0, self._submitted + offset_s - time.perf_counter()))

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._submitted

    def mark(self, name: str) -> None:
        self._marks[name] = time.perf_counter()

    def finish(self, timeout_s: float) -> Timed:
        result, ended = self._future.result(timeout_s)
        client = result.report.client
        assert client is not None
        start = ended - client.wall_s  # the schedule's start, to within the summary's ms
        return Timed(result, start, {name: t - start for name, t in self._marks.items()})


def _timed_load(url: str, **spec: Any) -> tuple[LoadResult, float]:
    load = spec_from_args(**spec)
    timeout_s = max(c.timeout_ms for c in load.workload.classes) / 1000 + 1.0
    result = run_load_sync(url, load.workload, load.schedule, client_timeout_s=timeout_s)
    return result, time.perf_counter()


class Cluster:
    """The hosts, their servers and headway's processes; ``close`` stops them all."""

    def __init__(self, network: Network, workdir: Path) -> None:
        self.network = network
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True)
        names = ("client", "gw", "w1", "w2", "redis", "nats", "dns")
        self.hosts = {name: network.host(name) for name in names}
        self.client, self.gw = self.hosts["client"], self.hosts["gw"]
        self.gateway_url = f"http://{self.gw.address}:{GATEWAY_PORT}"
        self.gateway_metrics_url = f"http://{self.gw.address}:{GATEWAY_OPS_PORT}"
        self.billing_url = f"http://{self.gw.address}:{BILLING_PORT}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.postgres: PostgresServer | None = None
        self.redis: RedisServer | None = None
        self.nats: NatsServer | None = None
        self.dns: Dnsmasq | None = None
        self._http = httpx.Client(timeout=2.0)  # used only on the client host's threads
        self.postgres_url = ""

    # Start ----------------------------------------------------------------------------

    def start(self) -> None:
        gw, redis, nats = self.gw, self.hosts["redis"], self.hosts["nats"]
        self.postgres = gw.call(
            PostgresServer, POSTGRES_PORT, fsync=False, host=gw.address
        )  # made inside: its free-port probes and pg_isready run on the gw host
        gw.call(self.postgres.start)
        gw.call(self.postgres.psql, f"CREATE DATABASE {DATABASE}")
        self.postgres_url = self.postgres.url_of(DATABASE)
        self.redis = redis.call(RedisServer, REDIS_PORT, host=redis.address)
        redis.call(self.redis.start)
        self.nats = nats.call(NatsServer, NATS_PORT, host=nats.address)
        nats.call(self.nats.start)
        self.dns = Dnsmasq(self.hosts["dns"], self.workdir, self.logs / "dnsmasq.log")
        wait_for(lambda: self.client.call(self.dns_answer) is not None, 10, "dnsmasq")
        gw.call(self._seed)
        for worker in ("w1", "w2"):
            self.start_worker(worker, backend="synthetic")
        self.dns.serve([self.hosts["w1"].address, self.hosts["w2"].address])
        shared = ["--postgres-url", self.postgres_url, "--nats-url", self.nats.url]
        data = ["--data-dir", str(self.workdir / "gw")]
        self.spawn(
            "gateway",
            gw,
            [
                "run",
                "gateway",
                *data,
                "--id",
                "gw",
                "--host",
                gw.address,
                "--port",
                str(GATEWAY_PORT),
                "--ops-host",
                gw.address,
                "--ops-port",
                str(GATEWAY_OPS_PORT),
                "--embed-dns",
                f"{EMBED_NAME}:{WORKER_PORT}",
                "--dns-server",
                f"{self.hosts['dns'].address}:{DNS_PORT}",
                "--redis-url",
                self.redis.url,
                *shared,
            ],
            {"HEADWAY_WEIGHTS__TOKEN": WEIGHTS_TOKEN},
        )
        self.spawn(
            "billing",
            gw,
            ["run", "billing", *data, "--host", gw.address, "--port", str(BILLING_PORT), *shared],
        )
        for name, url in (
            ("w1", self.worker_url("w1")),
            ("w2", self.worker_url("w2")),
            ("gateway", self.gateway_url),
            ("billing", self.billing_url),
        ):
            self.wait_ready(name, url)
        wait_for(
            lambda: self.replica_states() == {"w1": "ready", "w2": "ready"},
            START_TIMEOUT_S,
            "the gateway to find both workers through DNS",
        )

    def _seed(self) -> None:
        registry = PostgresRegistry(self.postgres_url)
        try:
            registry.seed_demo()
            for tenant in TENANTS:
                registry.add_tenant(
                    tenant.name,
                    "interactive",
                    rate_texts_per_s=tenant.rate_texts_per_s,
                    burst_texts=tenant.burst_texts,
                    key=tenant.key,
                )
        finally:
            registry.close()

    def spawn(
        self, name: str, host: Host, args: list[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
        if self.nats is not None:  # where start-up reads NATS's fsync setting
            base["HEADWAY_STREAMS__MONITOR_URLS"] = self.nats.monitor_url
        with (self.logs / f"{name}.log").open("ab") as log:
            process = host.run(
                [*HEADWAY, *args],
                env=base | CHILD_ENV | dict(env or {}),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes[name] = process
        return process

    def start_worker(
        self, name: str, *, backend: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        host = self.hosts.get(name) or self.network.host(name)
        self.hosts[name] = host
        data_dir = self.workdir / name
        data_dir.mkdir(exist_ok=True)
        args = ["run", "worker", "--backend", backend, "--data-dir", str(data_dir)]
        args += ["--host", host.address, "--port", str(WORKER_PORT)]
        return self.spawn(
            name, host, args, {"HEADWAY_POSTGRES_URL": self.postgres_url} | dict(env or {})
        )

    def fetching_worker_env(self) -> dict[str, str]:
        """What a worker needs to fetch a version it lacks from the gateway's store."""
        return {"HEADWAY_WEIGHTS__URL": self.gateway_url, "HEADWAY_WEIGHTS__TOKEN": WEIGHTS_TOKEN}

    def import_default_model(self) -> str:
        """all-MiniLM-L6-v2 into the gateway host's store, registered with its aliases;
        its version."""
        settings = load_settings(
            flags={"data_dir": str(self.workdir / "gw"), "postgres_url": self.postgres_url}
        )

        def imported() -> str:
            registry = open_registry(settings)
            try:
                return ensure_default_model(settings, registry).version
            finally:
                registry.close()

        return self.gw.call(imported)

    def wait_ready(self, name: str, url: str, timeout_s: float = START_TIMEOUT_S) -> None:
        process = self.processes[name]

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(
                    f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                )
            try:
                return self.get(url + "/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_for(ready, timeout_s, f"{name} to be ready", interval_s=0.1)
        except AssertionError as exc:
            exc.add_note(self.log_tail(name))
            raise

    # Probes, from the client host --------------------------------------------------------

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.client.call(self._http.get, url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.client.call(self._http.post, url, **kwargs)

    def dns_answer(self) -> list[str] | None:
        assert self.dns is not None
        return self.dns.answer()

    def worker_url(self, name: str) -> str:
        return f"http://{self.hosts[name].address}:{WORKER_PORT}"

    def metrics(self, url: str) -> str:
        answer = self.get(url + "/metrics")
        answer.raise_for_status()
        return answer.text

    def replica_states(self) -> dict[str, str]:
        """Worker host name → its state in the gateway's embed pool."""
        by_url = {self.worker_url(name): name for name in self.hosts if name.startswith("w")}
        pools = self.get(self.gateway_url + "/admin/replicas", headers=ADMIN).json()["pools"]
        return {by_url.get(r["url"], r["url"]): r["state"] for r in pools.get("embed", [])}

    def load(
        self, tenant: Tenant, *, rate: float, seconds: float, seed: int, **spec: Any
    ) -> BackgroundLoad:
        """Open-loop load from the client host: Poisson arrivals, 1-4 texts a request, a
        2 s deadline (X-Timeout-Ms; the client gives up 1 s later)."""
        options = {
            "model": "synthetic",
            "texts": (1, 4),
            "arrivals": "poisson",
            "timeout_ms": 2000,
        } | spec
        future = self.client.submit(
            _timed_load,
            self.gateway_url,
            rate=rate,
            duration=seconds,
            key=tenant.key,
            seed=seed,
            **options,
        )
        return BackgroundLoad(future)

    def psql(self, sql: str) -> str:
        """``sql`` on the registry's and ledger's database, from the gateway host."""
        assert self.postgres is not None
        return self.gw.call(self.postgres.psql, sql, DATABASE).strip()

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def log_tail(self, name: str) -> str:
        return f"--- {name} log (end) ---\n{tail(self.logs / f'{name}.log')}"

    # Stop ------------------------------------------------------------------------------

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.client.call(self._http.close)
        for server in (self.nats, self.redis, self.postgres):
            if server is not None:
                server.close()


@contextlib.contextmanager
def running_cluster(workdir: Path) -> Iterator[Cluster]:
    with Network("hwmh") as network:
        cluster = Cluster(network, workdir)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.close()


# Reading what came back ---------------------------------------------------------------


def samples(exposition: str, name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def outcomes_by_type(exposition: str, tenant: Tenant) -> Counter[str]:
    """The gateway's answers to ``tenant``'s model requests, by outcome (ok or error type)."""
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if (
                sample.name == "headway_model_requests_total"
                and sample.labels.get("tenant") == tenant.name
            ):
                counts[sample.labels["outcome"]] += int(sample.value)
    return counts


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    requests: int
    outcomes: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None

    def describe(self) -> str:
        p50 = "-" if self.p50_ms is None else f"{self.p50_ms:.1f}"
        p99 = "-" if self.p99_ms is None else f"{self.p99_ms:.1f}"
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
        return f"{self.name}: {self.requests} requests ({counts}), p50 {p50} ms, p99 {p99} ms"


def phases(timed: Timed, start_mark: str, end_mark: str) -> list[Phase]:
    """The run in three: *before* (answered before ``start_mark``), *during* (the rest sent
    before ``end_mark``: every request the fault could touch) and *after*."""
    r = timed.records
    begin, end = timed.marks[start_mark], timed.marks[end_mark]
    answered = r.intended_s + r.latency_s
    before = answered < begin
    after = r.intended_s >= end
    during = ~before & ~after
    return [
        _phase("before", r, before),
        _phase("during", r, during),
        _phase("after", r, after),
    ]


def _phase(name: str, r: Records, rows: np.ndarray) -> Phase:
    outcome = r.outcome[rows]
    served = r.latency_s[rows][outcome == Outcome.OK]
    counts = Counter(Outcome(int(o)).label for o in outcome)
    return Phase(
        name,
        int(rows.sum()),
        dict(counts),
        quantile(served, 0.50) * 1000 if served.size else None,
        quantile(served, 0.99) * 1000 if served.size else None,
    )
