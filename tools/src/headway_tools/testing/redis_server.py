"""A throw-away ``redis-server`` on a free port, for tests that need a real Redis.

No persistence, its own temporary directory, and ``start()`` after ``stop()`` or
``kill()`` comes back on the same port, so a test can take Redis away mid-load
and bring it back where its clients expect it.

Options for the layouts the gateway must handle: ``maxmemory`` and ``maxmemory_policy``
(the quota instance under ``noeviction``, the cache's under ``allkeys-lru``),
``password`` (``requirepass``) and ``users`` (ACL users with every right, the default
user then off), and ``tls``: TLS only, on a CA of its own (``tls_ca``), asking for a
client certificate (``tls_client_cert`` / ``tls_client_key``) when ``tls_clients``.
"""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from headway.tls.certs import ROLES, issue, make_ca
from headway_tools.testing.server import ServerProcess, free_port


class RedisServerError(RuntimeError):
    """redis-server is missing, or did not start answering PING in time."""


def answers_ping(
    port: int,
    timeout_s: float = 0.2,
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
) -> bool:
    """Whether a Redis answers there: PONG, or the refusal of a server that wants AUTH."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            if tls is None:
                return _ping(raw)
            with tls.wrap_socket(raw, server_hostname=host) as conn:
                return _ping(conn)
    except OSError:
        return False


def _ping(conn: socket.socket) -> bool:
    conn.sendall(b"PING\r\n")
    return conn.recv(64).startswith((b"+PONG", b"-NOAUTH"))


class RedisServer(ServerProcess):
    """One ``redis-server`` process; ``url`` and ``port`` stay the same across restarts.
    ``host``: the address it listens on (another host's, in a network namespace)."""

    def __init__(
        self,
        port: int | None = None,
        start_timeout_s: float = 10.0,
        host: str = "127.0.0.1",
        *,
        maxmemory: str | None = None,
        maxmemory_policy: str | None = None,
        password: str | None = None,
        users: Mapping[str, str] | None = None,
        tls: bool = False,
        tls_clients: bool = False,
    ) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerError(
                "redis-server is not on PATH; install it (apt-get install redis-server)"
            )
        self._executable = executable
        self.host = host
        self.port = port if port is not None else free_port()
        self.url = f"{'rediss' if tls else 'redis'}://{host}:{self.port}/0"
        self._start_timeout_s = start_timeout_s
        self._dir = tempfile.TemporaryDirectory(prefix="headway-redis-")
        self._options: dict[str, str] = {}
        if maxmemory is not None:
            self._options["maxmemory"] = maxmemory
        if maxmemory_policy is not None:
            self._options["maxmemory-policy"] = maxmemory_policy
        if password is not None:
            self._options["requirepass"] = password
        self._users = dict(users or {})
        self.tls = tls
        if tls:
            self._write_certificates(tls_clients)

    @property
    def tls_ca(self) -> Path:
        return Path(self._dir.name) / "ca.crt"

    @property
    def tls_client_cert(self) -> Path:
        return Path(self._dir.name) / "client.crt"

    @property
    def tls_client_key(self) -> Path:
        return Path(self._dir.name) / "client.key"

    def _write_certificates(self, ask_clients: bool) -> None:
        now = datetime.datetime.now(datetime.UTC)
        ca = make_ca(days=2, now=now, name="headway test Redis CA")
        server = issue(ca, ROLES["worker"], hosts=(self.host,), days=2, now=now)
        client = issue(ca, ROLES["gateway"], hosts=(), days=2, now=now)
        folder = Path(self._dir.name)
        self.tls_ca.write_bytes(ca.certificate_pem())
        (folder / "server.crt").write_bytes(server.certificate_pem())
        (folder / "server.key").write_bytes(server.key_pem())
        self.tls_client_cert.write_bytes(client.certificate_pem())
        self.tls_client_key.write_bytes(client.key_pem())
        self._options.update(
            {
                "port": "0",
                "tls-port": str(self.port),
                "tls-cert-file": str(folder / "server.crt"),
                "tls-key-file": str(folder / "server.key"),
                "tls-ca-cert-file": str(self.tls_ca),
                "tls-auth-clients": "yes" if ask_clients else "no",
            }
        )

    def _ping_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=str(self.tls_ca))
        if self._options.get("tls-auth-clients") == "yes":
            context.load_cert_chain(self.tls_client_cert, self.tls_client_key)
        return context

    def start(self) -> RedisServer:
        if self.running:
            raise RedisServerError(f"redis-server on port {self.port} is already running")
        log_path = Path(self._dir.name) / "redis.log"
        options = {
            "port": str(self.port),
            "bind": self.host,
            "save": "",
            "appendonly": "no",
            "dir": self._dir.name,
            "daemonize": "no",
            # Its clients are on other hosts when it listens on one's address.
            "protected-mode": "yes" if self.host == "127.0.0.1" else "no",
            **self._options,
        }
        argv = [self._executable]
        for name, value in options.items():
            argv += [f"--{name}", value]
        for user, secret in self._users.items():
            argv += ["--user", user, "on", f">{secret}", "~*", "&*", "+@all"]
        if self._users:
            argv += ["--user", "default", "off"]
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self._start_timeout_s
        ping_context = self._ping_context()
        while not answers_ping(self.port, host=self.host, tls=ping_context):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._reap()
                raise RedisServerError(
                    f"redis-server on port {self.port} did not answer PING:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.01)  # poll interval of the condition wait above
        return self
