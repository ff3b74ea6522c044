"""A throw-away ``redis-server`` on a free port, for tests that need a real Redis.

No persistence, its own temporary directory, and ``start()`` after ``stop()`` or
``kill()`` comes back on the same port, so a test can take Redis away mid-load
and bring it back where its clients expect it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from headway.testing.server import ServerProcess, free_port


class RedisServerError(RuntimeError):
    """redis-server is missing, or did not start answering PING in time."""


def answers_ping(port: int, timeout_s: float = 0.2, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(ServerProcess):
    """One ``redis-server`` process; ``url`` and ``port`` stay the same across restarts.
    ``host``: the address it listens on (another host's, in a network namespace)."""

    def __init__(
        self, port: int | None = None, start_timeout_s: float = 10.0, host: str = "127.0.0.1"
    ) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerError(
                "redis-server is not on PATH; install it (apt-get install redis-server)"
            )
        self._executable = executable
        self.host = host
        self.port = port if port is not None else free_port()
        self.url = f"redis://{host}:{self.port}/0"
        self._start_timeout_s = start_timeout_s
        self._dir = tempfile.TemporaryDirectory(prefix="headway-redis-")

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
        }
        argv = [self._executable]
        for name, value in options.items():
            argv += [f"--{name}", value]
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self._start_timeout_s
        while not answers_ping(self.port, host=self.host):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._reap()
                raise RedisServerError(
                    f"redis-server on port {self.port} did not answer PING:\n"
                    + log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.01)  # poll interval of the condition wait above
        return self
