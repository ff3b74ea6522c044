"""``headway up``: the whole system as child processes of one foreground process.

The supervisor opens every listening socket itself and hands each child its
socket (no race for free ports), starts the workers, the billing consumer (its
socket serves its /metrics), the gateways and a batch executor (its /metrics
likewise), and waits. The executor and the gateways share a token made for this
run, in the run's settings file (readable by this user only).
On SIGINT or SIGTERM it stops the gateway first (it finishes in-flight
requests), then the workers (they finish their queues), and exits. Children
live in their own process group, so a terminal's Ctrl-C reaches only the
supervisor, which signals each child once; each child also asks the kernel to
send it SIGTERM if the supervisor dies, so nothing is orphaned. If a child
exits on its own it is started again on the same address (the gateway retries
its chunks elsewhere meanwhile); one that keeps exiting right after it starts
stops everything, and ``up`` exits non-zero.

Once every child is started it writes ``<data_dir>/run/prometheus-targets.json``, the
children's addresses in Prometheus ``file_sd`` form (deploy/prometheus/prometheus.yml
reads it); a restarted child keeps its address, so the file stays true without rewrites.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from headway.serve import listening_socket
from headway.settings import Settings

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 40.0
QUICK_EXIT_S = 10.0
MAX_QUICK_EXITS = 3


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


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        config_path: Path,
        worker_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """``worker_env``: settings for one worker, as ``HEADWAY_*`` variables, by its
        name (``embed-worker-2``); a benchmark's slow replica, say."""
        self.settings = settings
        self.config_path = config_path
        self._worker_env = worker_env or {}
        self.children: list[Child] = []
        self.gateways: list[Child] = []
        self.executors: list[Child] = []
        self._stopping = False

    def _spawn(
        self, name: str, args: list[str], sock: socket.socket, env: Mapping[str, str] | None = None
    ) -> Child:
        host, port = sock.getsockname()[:2]
        process = self._popen(args, sock, env)
        child = Child(name, process, f"http://{host}:{port}", args, (host, port), 0.0, env)
        child.started = time.monotonic()
        self.children.append(child)
        log.info("started %s (pid %d) on %s", name, child.process.pid, child.url)
        return child

    def _popen(
        self, args: list[str], sock: socket.socket, env: Mapping[str, str] | None
    ) -> subprocess.Popen[bytes]:
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
        return subprocess.Popen(
            command,
            pass_fds=(sock.fileno(),),
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
            child.process = self._popen(child.args, sock, child.env)
        finally:
            sock.close()
        child.started = time.monotonic()
        log.warning("restarted %s (pid %d) on %s", child.name, child.process.pid, child.url)
        return True

    def start(self) -> Child:
        up = self.settings.up
        pools = {"embed": up.embed_replicas, "rerank": up.rerank_replicas}
        urls: dict[str, list[str]] = {"embed": [], "rerank": []}
        sockets = []
        for pool, count in pools.items():
            for index in range(count):
                sock = listening_socket(self.settings.worker.host, 0)
                sockets.append(sock)
                name = f"{pool}-worker-{index}"
                child = self._spawn(
                    name, ["worker", "--pool", pool], sock, self._worker_env.get(name)
                )
                urls[pool].append(child.url)
        sock = listening_socket(self.settings.billing.host, 0)
        sockets.append(sock)
        self._spawn("billing", ["billing", "run"], sock)
        gateway_args = ["gateway"]
        for pool, pool_urls in urls.items():
            if pool_urls:
                gateway_args += [f"--{pool}-replicas", ",".join(pool_urls)]
        port = self.settings.gateway.port
        for index in range(up.gateways):
            sock = listening_socket(self.settings.gateway.host, port + index if port else 0)
            sockets.append(sock)
            name = "gateway" if index == 0 else f"gateway-{index}"
            # Its id names its outbox: a gateway restarted here relays what it left.
            self.gateways.append(self._spawn(name, [*gateway_args, "--id", name], sock))
        sock = listening_socket(self.settings.worker.host, 0)
        sockets.append(sock)
        urls_of_gateways = ",".join(g.url for g in self.gateways)
        self.executors.append(
            self._spawn("batches", ["batches", "run", "--gateway-urls", urls_of_gateways], sock)
        )
        for sock in sockets:  # the children hold them now
            sock.close()
        targets = write_scrape_targets(self.settings, self.children)
        log.info("prometheus scrape targets (file_sd) in %s", targets)
        return self.gateways[0]

    def wait_ready(self, gateway: Child) -> bool:
        """Until ``gateway`` and every other gateway answer /readyz with 200."""
        deadline = time.monotonic() + self.settings.up.ready_timeout_s
        waiting = {gateway.url, *(g.url for g in self.gateways)}
        while time.monotonic() < deadline and not self._stopping:
            if self._exited() is not None:
                return False
            waiting = {url for url in waiting if not _ready(url)}
            if not waiting:
                return True
            time.sleep(0.2)
        return False

    def _exited(self) -> Child | None:
        return next((c for c in self.children if c.process.poll() is not None), None)

    def run(self) -> int:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        gateway = self.start()
        if self.wait_ready(gateway):
            others = "".join(f" {g.url}" for g in self.gateways[1:])
            print(
                f"headway is ready on {gateway.url}{others}  "
                f"(embed replicas: {self.settings.up.embed_replicas}, "
                f"rerank replicas: {self.settings.up.rerank_replicas}); Ctrl-C stops it",
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
            time.sleep(0.2)
        self.stop()
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def stop(self) -> None:
        """The batch executor first (it sends to the gateways), then the gateways, then the
        workers; SIGKILL whatever outlives the timeout."""
        self._stopping = True
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


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def with_executor_token(settings: Settings) -> Settings:
    """``settings`` with a batch executor token: the one set, or one made for this run."""
    if settings.batches.executor_token:
        return settings
    batches = settings.batches.model_copy(update={"executor_token": secrets.token_hex(16)})
    return settings.model_copy(update={"batches": batches})


# The first argument of a child's command -> its Prometheus job.
_JOBS = {"worker": "worker", "billing": "billing", "gateway": "gateway", "batches": "executor"}


def scrape_targets(children: list[Child]) -> list[dict[str, object]]:
    """One Prometheus ``file_sd`` entry per child: its host:port, and labels ``job``,
    ``instance`` (the child's name) and, for a worker, ``pool``."""
    entries: list[dict[str, object]] = []
    for child in children:
        host, port = child.address
        labels = {"job": _JOBS[child.args[0]], "instance": child.name}
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
    """The resolved settings, for the children to read as their config file."""
    run_dir = settings.data_dir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"settings-{os.getpid()}.json"
    # Only this user may read it: it holds the batch executor's token.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(json.dumps(settings.model_dump(mode="json"), indent=2))
    return path
