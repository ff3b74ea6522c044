"""``headway up``: the whole system as child processes of one foreground process.

The supervisor binds every listening socket itself and hands each child its own (no race for
free ports): workers, the billing consumer, the gateways (a client port, and an operations
listener, their only /metrics: ``app/ops.py``) and a batch executor, which shares a token made
for this run with the gateways (in the run's settings file, readable by this user only). A
restarted child keeps its addresses, so ``<data_dir>/run/prometheus-targets.json`` stays true.

Children run in their own process group (Ctrl-C reaches only the supervisor, which signals each
once) and get SIGTERM if it dies. On SIGINT or SIGTERM it stops the gateways first (they finish
in-flight requests), then the workers. A child that exits is started again; one that keeps
exiting right after starting stops everything, and ``up`` exits non-zero.

Scale to zero (docs/scale-to-zero.md): the supervisor serves ``wake_endpoint.py`` on 127.0.0.1.
With ``up.prewarm`` off a worker's port is held, bound but refusing, until a gateway wakes its
pool: its first worker starts, the rest once it is ready. The rerank pool starts so, on its
first request, whenever the registry holds no cross-encoder (``prewarmed_pools``): rerank
is then scored by cosine on the embed pool, and a rerank worker would serve nothing.
Workers of a pool idle past ``up.idle_stop_s`` are stopped, drained: not a death, no
restart. With ``tls`` workers serve mutual TLS, and gateways https with ``tls.public_cert``,
trusted by the readiness checks.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from headway.privileges import Component
from headway.registry.model import Snapshot
from headway.registry.open import open_registry
from headway.serve import BACKLOG, listening_socket
from headway.settings import Settings
from headway.tls.hops import gateway_client
from headway.up.pool_idle import IdleWatch, pool_traffic, read_metrics
from headway.up.wake_endpoint import WakeEndpoint

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 40.0
QUICK_EXIT_S = 10.0
MAX_QUICK_EXITS = 3
TICK_S = 0.2
READ_GATEWAYS_S = 1.0
METRICS_PREFIX = "gateway metrics (for operators; the client port has none): "
"""Printed before the ready line, then each gateway's /metrics URL."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    args: list[str]
    address: tuple[str, int]
    started: float
    env: Mapping[str, str] | None = None
    quick_exits: int = 0
    stopped: bool = False
    """Stopped on purpose (its pool was idle): not restarted, started again on a wake."""
    ops_address: tuple[str, int] | None = None
    """A gateway's operations listener (its /metrics); None: /metrics is on ``address``."""

    @property
    def metrics_address(self) -> tuple[str, int]:
        return self.ops_address or self.address

    @property
    def metrics_url(self) -> str:
        """The base URL of its /metrics (the scheme of ``url``: a gateway serving https
        serves its operations listener with the same certificate)."""
        host, port = self.metrics_address
        return f"{self.url.split('://')[0]}://{host}:{port}"


@dataclass
class WorkerPlace:
    """One worker of a pool: its name and address, its child once started, and while no
    process listens there, the port held for it (bound, refusing connections)."""

    name: str
    pool: str
    url: str
    address: tuple[str, int]
    held: socket.socket | None = None
    child: Child | None = None

    @property
    def running(self) -> bool:
        """Started and not stopped on purpose (one that crashed is restarted: running)."""
        return self.child is not None and not self.child.stopped

    @property
    def startable(self) -> bool:
        """Never started, or its last process has exited (a stopped one drains first)."""
        return self.child is None or self.child.process.poll() is not None


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        config_path: Path,
        worker_env: Mapping[str, Mapping[str, str]] | None = None,
        postgres_urls: Mapping[Component, str] | None = None,
    ) -> None:
        """``worker_env``: settings for one worker, as ``HEADWAY_*`` variables, by its
        name (``embed-worker-2``); a benchmark's slow replica, say. ``postgres_urls``:
        each component's own Postgres role (``db_setup.fresh_component_urls``), given
        to its processes as their ``postgres_url``; None: the config's, for all."""
        self.settings = settings
        self.config_path = config_path
        self._worker_env = worker_env or {}
        self._postgres_urls = postgres_urls or {}
        self.children: list[Child] = []
        self.gateways: list[Child] = []
        self.executors: list[Child] = []
        self._stopping = False
        self.places: dict[str, list[WorkerPlace]] = {}
        """Each pool's workers, started or not, in order."""
        self._wake_endpoint: WakeEndpoint | None = None
        self.prewarmed: frozenset[str] = frozenset()
        """The pools whose workers ``start`` starts (``prewarmed_pools``)."""
        self._wanted: set[str] = set()  # pools woken whose first worker waits for its port
        self._rest: dict[str, list[WorkerPlace]] = {}  # started once the first is ready
        idle_stop_s = settings.up.idle_stop_s
        self._idle = None if idle_stop_s is None else IdleWatch(idle_stop_s)
        self._next_reading = 0.0
        # With tls set, workers serve https (mutual TLS) and gateways https to clients.
        self._gateway_tls = gateway_client(settings.tls)

    def _postgres(self, component: Component) -> dict[str, str]:
        """The environment naming ``component``'s own Postgres URL, if it has one."""
        url = self._postgres_urls.get(component)
        return {} if url is None else {"HEADWAY_POSTGRES_URL": url}

    def _spawn(
        self,
        name: str,
        args: list[str],
        sock: socket.socket,
        env: Mapping[str, str] | None = None,
        scheme: str = "http",
        ops_sock: socket.socket | None = None,
    ) -> Child:
        host, port = sock.getsockname()[:2]
        process = self._popen(args, sock, env, ops_sock)
        child = Child(name, process, f"{scheme}://{host}:{port}", args, (host, port), 0.0, env)
        if ops_sock is not None:
            child.ops_address = ops_sock.getsockname()[:2]
        child.started = time.monotonic()
        self.children.append(child)
        if ops_sock is None:
            log.info("started %s (pid %d) on %s", name, process.pid, child.url)
        else:
            log.info(
                "started %s (pid %d) on %s, its /metrics on %s",
                name,
                process.pid,
                child.url,
                child.metrics_url,
            )
        return child

    def _popen(
        self,
        args: list[str],
        sock: socket.socket,
        env: Mapping[str, str] | None,
        ops_sock: socket.socket | None = None,
    ) -> subprocess.Popen[bytes]:
        """The child's command with its socket (``--fd``) and, for a gateway, its
        operations listener's (``--ops-fd``), both inherited."""
        command = [
            sys.executable,
            "-m",
            "headway",
            *args,
            "--config",
            str(self.config_path),
            "--fd",
            str(sock.fileno()),
        ]
        fds = [sock.fileno()]
        if ops_sock is not None:
            command += ["--ops-fd", str(ops_sock.fileno())]
            fds.append(ops_sock.fileno())
        return subprocess.Popen(
            command,
            pass_fds=tuple(fds),
            env={**os.environ, **env} if env else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def restart(self, child: Child) -> bool:
        """Start a child that died again, on the same address; False if it keeps dying.

        A child that exits within ``QUICK_EXIT_S`` of starting, ``MAX_QUICK_EXITS`` times
        in a row, is crash-looping (a model that cannot load, say): give up.
        """
        quick = time.monotonic() - child.started < QUICK_EXIT_S
        child.quick_exits = child.quick_exits + 1 if quick else 0
        if child.quick_exits >= MAX_QUICK_EXITS:
            return False
        try:
            sock = listening_socket(*child.address)
        except OSError as exc:
            log.error("cannot listen on %s again for %s: %s", child.url, child.name, exc)
            return False
        try:
            ops_sock = None if child.ops_address is None else listening_socket(*child.ops_address)
        except OSError as exc:
            sock.close()
            log.error("cannot listen on %s again for %s: %s", child.metrics_url, child.name, exc)
            return False
        try:
            child.process = self._popen(child.args, sock, child.env, ops_sock)
        finally:
            sock.close()
            if ops_sock is not None:
                ops_sock.close()
        child.started = time.monotonic()
        log.warning("restarted %s (pid %d) on %s", child.name, child.process.pid, child.url)
        return True

    def start(self) -> Child:
        up = self.settings.up
        pools = {"embed": up.embed_replicas, "rerank": up.rerank_replicas}
        self.prewarmed = prewarmed_pools(self.settings, pools, self._cross_encoders())
        urls: dict[str, list[str]] = {"embed": [], "rerank": []}
        sockets = []
        for pool, count in pools.items():
            for index in range(count):
                place = self._place(pool, index)
                if pool in self.prewarmed:
                    self._start_worker(place)
                urls[pool].append(place.url)
        self._wake_endpoint = WakeEndpoint([pool for pool, count in pools.items() if count])
        wake = {"HEADWAY_GATEWAY__WAKE_URL": self._wake_endpoint.start()}
        sock = listening_socket(self.settings.billing.host, 0)
        sockets.append(sock)
        self._spawn("billing", ["run", "billing"], sock, self._postgres("billing"))
        gateway_args = ["run", "gateway"]
        for pool, pool_urls in urls.items():
            if pool_urls:
                gateway_args += [f"--{pool}-urls", ",".join(pool_urls)]
        port = self.settings.gateway.port
        for index in range(up.gateways):
            sock = listening_socket(self.settings.gateway.host, port + index if port else 0)
            # Its /metrics: a free port each (a fixed one would collide with the next
            # gateway's, or another `up`'s); printed, and in the scrape targets.
            ops_sock = listening_socket(self.settings.gateway.ops_host, 0)
            sockets += [sock, ops_sock]
            name = "gateway" if index == 0 else f"gateway-{index}"
            # Its id names its outbox: a gateway restarted here relays what it left.
            scheme = "https" if self.settings.tls.public else "http"
            env = wake | self._postgres("gateway")
            gateway = self._spawn(
                name, [*gateway_args, "--id", name], sock, env, scheme=scheme, ops_sock=ops_sock
            )
            self.gateways.append(gateway)
        sock = listening_socket(self.settings.worker.host, 0)
        sockets.append(sock)
        urls_of_gateways = ",".join(g.url for g in self.gateways)
        self.executors.append(
            self._spawn(
                "batches",
                ["run", "batches", "--gateway-urls", urls_of_gateways],
                sock,
                self._postgres("executor"),
            )
        )
        for sock in sockets:  # the children hold them now
            sock.close()
        targets = write_scrape_targets(self.settings, self.children)
        log.info("prometheus scrape targets (file_sd) in %s", targets)
        return self.gateways[0]

    def _cross_encoders(self) -> bool:
        """The registry names a cross-encoder (the rerank pool's work), or the workers'
        models are set by hand (``worker.models``: they may be)."""
        if self.settings.worker.models:
            return True
        registry = open_registry(self.settings)
        try:
            return holds_cross_encoder(registry.model_snapshot())
        finally:
            registry.close()

    def _place(self, pool: str, index: int) -> WorkerPlace:
        """A worker's address, its port held until it starts."""
        held = listening_socket(self.settings.worker.host, 0, listen=False)
        host, port = held.getsockname()[:2]
        scheme = "https" if self.settings.tls.internal else "http"
        place = WorkerPlace(
            f"{pool}-worker-{index}", pool, f"{scheme}://{host}:{port}", (host, port), held
        )
        self.places.setdefault(pool, []).append(place)
        return place

    def _start_worker(self, place: WorkerPlace) -> bool:
        """Start the worker of ``place`` on its port: the first time, or again after an idle
        stop; False if the port cannot be had."""
        sock, place.held = place.held, None
        try:
            if sock is None:
                sock = listening_socket(*place.address)
            else:
                sock.listen(BACKLOG)
        except OSError as exc:
            log.error("cannot listen on %s for %s: %s", place.url, place.name, exc)
            if sock is not None:
                sock.close()
            return False
        try:
            if place.child is None:
                args = ["run", "worker", "--pool", place.pool]
                env = self._postgres("worker") | dict(self._worker_env.get(place.name) or {})
                scheme = place.url.split("://")[0]
                place.child = self._spawn(place.name, args, sock, env, scheme)
            else:
                child = place.child
                child.process = self._popen(child.args, sock, child.env)
                child.started, child.stopped, child.quick_exits = time.monotonic(), False, 0
                log.info(
                    "started %s again (pid %d) on %s", child.name, child.process.pid, child.url
                )
        finally:
            sock.close()  # the child holds it now
        return True

    def wait_ready(self, gateway: Child) -> bool:
        """Until ``gateway`` and every other gateway answer /readyz with 200 and see a
        ready replica in every pool started (``prewarmed``)."""
        deadline = time.monotonic() + self.settings.up.ready_timeout_s
        waiting = {gateway.url, *(g.url for g in self.gateways)}
        while time.monotonic() < deadline and not self._stopping:
            if self._exited() is not None:
                return False
            context = None if self._gateway_tls is None else self._gateway_tls.current()
            waiting = {url for url in waiting if not _ready(url, context, self.prewarmed)}
            if not waiting:
                return True
            time.sleep(0.2)
        return False

    def _exited(self) -> Child | None:
        """A child that exited on its own (not one stopped on purpose)."""
        return next(
            (c for c in self.children if not c.stopped and c.process.poll() is not None), None
        )

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        gateway = self.start()
        if self.wait_ready(gateway):
            metrics = " ".join(f"{g.metrics_url}/metrics" for g in self.gateways)
            print(f"{METRICS_PREFIX}{metrics}", flush=True)
            others = "".join(f" {g.url}" for g in self.gateways[1:])
            up = self.settings.up
            if not up.prewarm:
                started = ", each pool started by its first request"
            elif up.rerank_replicas and "rerank" not in self.prewarmed:
                started = ", started by a first cross-encoder request: none is imported"
            else:
                started = ""
            print(
                f"headway is ready on {gateway.url}{others}  "
                f"(embed replicas: {up.embed_replicas}, "
                f"rerank replicas: {up.rerank_replicas}{started}); Ctrl-C stops it",
                flush=True,
            )
            if self.settings.observability.console.enabled:
                print(
                    f"operator console: {gateway.url}/console (an admin key signs in)", flush=True
                )
        elif not self._stopping:
            log.error("headway did not become ready in %.0fs", self.settings.up.ready_timeout_s)
            self.stop()
            return 1
        while not self._stopping:
            exited = self._exited()
            if exited is not None:
                log.error("%s exited with status %s", exited.name, exited.process.returncode)
                if not self.restart(exited):
                    log.error("%s keeps exiting; stopping everything", exited.name)
                    self.stop()
                    return 1
            self._tend_pools(TICK_S)
        self.stop()
        return 0

    def _tend_pools(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for a wake; start the pools wanted, the rest of a pool once
        its first worker is ready; stop pools idle for ``up.idle_stop_s``."""
        assert self._wake_endpoint is not None
        woken = self._wake_endpoint.next_wake(wait_s)
        if woken is not None:
            self._wanted.add(woken)
        for pool in sorted(self._wanted):
            if self._wake(pool):
                self._wanted.discard(pool)
        self._hold_stopped_ports()
        now = time.monotonic()
        if now >= self._next_reading and (self._rest or self._idle is not None):
            self._next_reading = now + READ_GATEWAYS_S
            self._follow_traffic(now)

    def _wake(self, pool: str) -> bool:
        """Start the pool's first worker if none runs; False: try again (it is draining)."""
        places = self.places.get(pool, [])
        if not places or any(place.running for place in places):
            return True
        first = places[0]
        if not first.startable:
            return False
        log.info("pool %s wanted: starting %s", pool, first.name)
        new = first.child is None
        if self._start_worker(first) and len(places) > 1:
            self._rest[pool] = places[1:]
        if new:
            write_scrape_targets(self.settings, self.children)
        return True

    def _follow_traffic(self, now: float) -> None:
        """One reading of the gateways: start the rest of pools whose first worker is
        ready; stop the workers of pools idle long enough."""
        context = None if self._gateway_tls is None else self._gateway_tls.current()
        texts = [read_metrics(gateway.metrics_url, context) for gateway in self.gateways]
        traffic = pool_traffic(t for t in texts if t is not None) if None not in texts else None
        for pool, rest in list(self._rest.items()):
            reading = None if traffic is None else traffic.get(pool)
            if reading is not None and reading.ready >= 1:
                del self._rest[pool]
                new = [place for place in rest if place.child is None]
                for place in rest:
                    if not place.running and place.startable:
                        self._start_worker(place)
                if new:
                    write_scrape_targets(self.settings, self.children)
        if self._idle is None:
            return
        for pool, places in self.places.items():
            if not any(place.running for place in places):
                continue
            reading = None if traffic is None else traffic.get(pool)
            if self._idle.observe(pool, reading, now):
                self._stop_pool(pool)

    def _stop_pool(self, pool: str) -> None:
        for place in self.places[pool]:
            if place.running and place.child is not None:
                place.child.stopped = True
                if place.child.process.poll() is None:
                    place.child.process.send_signal(signal.SIGTERM)
        self._rest.pop(pool, None)
        if self._idle is not None:
            self._idle.forget(pool)
            log.info(
                "pool %s had no traffic for %.1fs: stopping its workers (its next request "
                "starts them again)",
                pool,
                self._idle.idle_stop_s,
            )

    def _hold_stopped_ports(self) -> None:
        """Hold the port of a worker stopped on purpose once it has exited, so that its
        address refuses connections (the gateways see the pool cold) and stays ours."""
        for places in self.places.values():
            for place in places:
                child = place.child
                if child is None or not child.stopped or place.held is not None:
                    continue
                if child.process.poll() is None:
                    continue
                try:
                    place.held = listening_socket(*place.address, listen=False)
                except OSError as exc:  # tried again at the next tick; the start listens anew
                    log.debug("cannot hold %s for %s yet: %s", place.url, place.name, exc)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def stop(self) -> None:
        """The batch executor first (it sends to the gateways), then the gateways, then the
        workers; SIGKILL whatever outlives the timeout."""
        self._stopping = True
        if self._wake_endpoint is not None:
            self._wake_endpoint.close()
        for places in self.places.values():
            for place in places:
                if place.held is not None:
                    place.held.close()
                    place.held = None
        rest = [c for c in self.children if c not in self.gateways and c not in self.executors]
        for group in (self.executors, self.gateways, rest):
            for child in group:
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for child in group:
                try:
                    child.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in time; killing it", child.name)
                    child.process.kill()
                    child.process.wait()


def prewarmed_pools(
    settings: Settings, counts: Mapping[str, int], cross_encoders: bool
) -> frozenset[str]:
    """The pools (by their worker counts) whose workers start with ``up``; the others
    start on their first request. None without ``up.prewarm``; else each with workers,
    the rerank pool only while there is a ``cross_encoder`` for it to serve, or where its
    being cold would keep the gateways unready (``gateway.cold_start_hold`` off)."""
    if not settings.up.prewarm:
        return frozenset()
    rerank = cross_encoders or not settings.gateway.cold_start_hold
    return frozenset(
        pool for pool, count in counts.items() if count and (pool != "rerank" or rerank)
    )


def holds_cross_encoder(snapshot: Snapshot) -> bool:
    """An alias of the registry names a cross-encoder."""
    return bool(snapshot.aliases_of_kind("cross-encoder"))


def _ready(
    url: str, context: ssl.SSLContext | None = None, pools: frozenset[str] = frozenset()
) -> bool:
    """The gateway at ``url`` answers /readyz 200 and sees a ready replica in each of
    ``pools`` (its body's ``pools``)."""
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=1, context=context) as response:
            if response.status != 200:
                return False
            if not pools:
                return True
            seen = json.loads(response.read())["pools"]
            return all(seen[pool]["ready"] >= 1 for pool in pools)
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return False


def with_executor_token(settings: Settings) -> Settings:
    """``settings`` with a batch executor token: the one set, or one made for this run."""
    if settings.batches.executor_token:
        return settings
    batches = settings.batches.model_copy(update={"executor_token": secrets.token_hex(16)})
    return settings.model_copy(update={"batches": batches})


def with_own_identity(settings: Settings) -> Settings:
    """``settings`` whose workers and line routes accept this run's own certificate: all of
    ``up``'s processes read one config, so they present one internal certificate (docs/tls.md),
    whatever role it was issued for. Unchanged without internal TLS."""
    tls = settings.tls
    if tls.cert is None or not tls.internal:
        return settings
    from headway.tls.certs import certificate_names
    from headway.tls.contexts import TlsFilesInvalid

    try:
        names = sorted(certificate_names(tls.cert.read_bytes()))
    except (OSError, ValueError) as exc:
        raise TlsFilesInvalid(f"{tls.cert}: not a readable PEM certificate ({exc})") from exc
    if not names:
        return settings
    first = names[:1]  # one identity is enough to be accepted
    update: dict[str, tuple[str, ...]] = {}
    if set(names).isdisjoint(tls.worker_callers):
        update["worker_callers"] = (*tls.worker_callers, *first)
    if set(names).isdisjoint(tls.line_callers):
        update["line_callers"] = (*tls.line_callers, *first)
    if not update:
        return settings
    log.info("every process presents %s: workers and line routes accept it", first[0])
    return settings.model_copy(update={"tls": tls.model_copy(update=update)})


# The command a child runs (``headway run <command>``) -> its Prometheus job.
_JOBS = {"worker": "worker", "billing": "billing", "gateway": "gateway", "batches": "executor"}


def scrape_targets(children: list[Child]) -> list[dict[str, object]]:
    """One Prometheus ``file_sd`` entry per child: the host:port of its /metrics (a
    gateway's operations listener), and labels ``job``, ``instance`` (the child's name)
    and, for a worker, ``pool``."""
    entries: list[dict[str, object]] = []
    for child in children:
        host, port = child.metrics_address
        labels = {"job": _JOBS[child.args[1]], "instance": child.name}
        if "--pool" in child.args:
            labels["pool"] = child.args[child.args.index("--pool") + 1]
        entries.append({"targets": [f"{host}:{port}"], "labels": labels})
    return entries


def scrape_targets_path(settings: Settings) -> Path:
    return settings.data_dir / "run" / "prometheus-targets.json"


def write_scrape_targets(settings: Settings, children: list[Child]) -> Path:
    """Write the children's scrape targets whole, by rename: Prometheus watches the file
    and must never read half of it."""
    path = scrape_targets_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(scrape_targets(children), indent=2), encoding="utf-8")
    os.replace(partial, path)
    return path


def write_run_config(settings: Settings) -> Path:
    """The resolved settings, for the children to read as their config file (their one
    shared certificate accepted by the workers: ``with_own_identity``)."""
    settings = with_own_identity(settings)
    run_dir = settings.data_dir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"settings-{os.getpid()}.json"
    # Only this user may read it: it holds the batch executor's token.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(json.dumps(settings.model_dump(mode="json"), indent=2))
    return path
