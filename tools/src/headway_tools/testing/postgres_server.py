"""A throw-away PostgreSQL on a free port, for tests and checkers that need a real one.

``initdb`` into a temporary directory (trust authentication, superuser ``headway``),
then ``postgres`` in its own process group, listening on 127.0.0.1 (or ``host``, whose
subnet it then trusts too) and a socket in that directory. ``stop()`` is a fast
shutdown (clients are disconnected, a checkpoint is written); ``kill()`` SIGKILLs the
whole group, postmaster and backends at once, as a machine crash would; ``start()``
after either comes back on the same port and data, recovering from the WAL.
``fsync=False`` trades that crash safety for speed in tests; a crash checker keeps
the default.

Postgres refuses to run as root: under root the server and ``initdb`` run as
``nobody``, and the directory is handed to it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from headway_tools.testing.server import ServerProcess, free_port

BINARIES_GLOB = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "nobody"
REQUIRED_BINARIES = ("initdb", "postgres", "pg_isready", "psql")


class PostgresServerError(RuntimeError):
    """The PostgreSQL binaries are missing, or the server did not start accepting in time."""


def find_binaries(pattern: str = BINARIES_GLOB) -> Path:
    """The newest ``bin`` directory holding ``REQUIRED_BINARIES``."""
    candidates = [
        path
        for path in Path("/").glob(pattern.lstrip("/"))
        if all((path / name).is_file() for name in REQUIRED_BINARIES)
    ]
    if not candidates:
        raise PostgresServerError(
            f"no PostgreSQL binaries in {pattern}; install them (apt-get install postgresql)"
        )
    return max(candidates, key=lambda path: _major(path.parent.name))


def _major(name: str) -> int:
    return int(name) if re.fullmatch(r"\d+", name) else -1


class PostgresServer(ServerProcess):
    """One PostgreSQL; ``url`` and ``port`` stay the same across restarts."""

    def __init__(
        self,
        port: int | None = None,
        *,
        fsync: bool = True,
        start_timeout_s: float = 30.0,
        binaries: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._bin = binaries if binaries is not None else find_binaries()
        self.host = host
        """The address it listens on (another host's, in a network namespace)."""
        self.port = port if port is not None else free_port()
        self.fsync = fsync
        self._start_timeout_s = start_timeout_s
        self._dir = tempfile.TemporaryDirectory(prefix="headway-postgres-")
        root = Path(self._dir.name)
        self.data_dir = root / "data"
        self.socket_dir = root / "sockets"
        self.log_path = root / "postgres.log"
        self._user = _unprivileged_user() if os.geteuid() == 0 else None
        self._initialized = False

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def start(self) -> PostgresServer:
        if self.running:
            raise PostgresServerError(f"postgres on port {self.port} is already running")
        if not self._initialized:
            self._initdb()
        argv = [
            str(self._bin / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.socket_dir),
            "-c",
            f"listen_addresses={self.host}",
            "-c",
            f"fsync={'on' if self.fsync else 'off'}",
        ]
        with self.log_path.open("ab") as log:
            self._process = self._spawn(argv, log)
        deadline = time.monotonic() + self._start_timeout_s
        while not self._accepting():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._kill_group()
                raise PostgresServerError(
                    f"postgres on port {self.port} did not accept connections:\n" + self.log_tail()
                )
            time.sleep(0.02)  # poll interval of the condition wait above
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """A fast shutdown (SIGINT): clients are cut off, a checkpoint is written."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._process = None

    def kill(self) -> None:
        """SIGKILL to the postmaster and every backend at once, as in a crash."""
        self._kill_group()

    def url_of(self, database: str) -> str:
        return f"postgresql://headway@{self.host}:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with ``psql``, unaligned, tuples only; its output."""
        done = subprocess.run(
            [
                str(self._bin / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.url_of(database),
                "-c",
                sql,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise PostgresServerError(f"psql failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    # -------------------------------------------------------------------------

    def _initdb(self) -> None:
        self.socket_dir.mkdir()
        if self._user is not None:
            for path in (Path(self._dir.name), self.socket_dir):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        argv = [
            str(self._bin / "initdb"),
            "-D",
            str(self.data_dir),
            "-A",
            "trust",
            "-U",
            "headway",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        with self.log_path.open("ab") as log:
            initdb = self._spawn(argv, log)
            code = initdb.wait(self._start_timeout_s)
        if code != 0:
            raise PostgresServerError(f"initdb exited with {code}:\n" + self.log_tail())
        if self.host != "127.0.0.1":  # initdb trusts loopback only; let the subnet in too
            with (self.data_dir / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")
        self._initialized = True

    def _spawn(self, argv: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        """``argv`` in a new process group (so ``kill`` reaches its children), as the
        unprivileged user when we are root."""
        user = self._user
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
            cwd=self._dir.name,
        )

    def _accepting(self) -> bool:
        probe = subprocess.run(
            [
                str(self._bin / "pg_isready"),
                "-q",
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                "headway",
                "-d",
                "postgres",
                "-t",
                "1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        return probe.returncode == 0

    def _kill_group(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):  # it had died already
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(10.0)
        self._process = None


def _unprivileged_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError as exc:
        raise PostgresServerError(
            f"running as root, and there is no user {UNPRIVILEGED_USER!r} to run postgres as"
        ) from exc
