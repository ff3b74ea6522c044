"""The registry on a SQLite file: the embedded default (``headway up`` with no Postgres).

Writers are the CLI, the admin API, ``headway up``'s first start and the benchmarks;
gateways mostly read, a whole ``Snapshot`` at a time (WAL mode lets them read while a
writer writes). Each call opens its own connection, so a ``Registry`` is safe to share
between threads. Reads run in one deferred transaction (one consistent view); writes
in ``BEGIN IMMEDIATE``, which takes the write lock before the first read.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from headway.registry.demo import DEMO_ADMIN_KEY as DEMO_ADMIN_KEY
from headway.registry.demo import DEMO_TENANTS as DEMO_TENANTS
from headway.registry.dialect import DialectName, Row
from headway.registry.errors import RegistryError as RegistryError  # callers catch it here
from headway.registry.errors import RegistryUnavailable
from headway.registry.rules import DEFAULT_BURST as DEFAULT_BURST
from headway.registry.rules import DEFAULT_RATE as DEFAULT_RATE
from headway.registry.sql import SqlRegistry
from headway.sqlite_wal import enable_wal

_UNAVAILABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN})
"""Primary result codes of a database that is there but cannot be had now."""


class Registry(SqlRegistry):
    def __init__(
        self, path: Path, *, clock: Callable[[], float] = time.time, timeout_s: float = 10.0
    ) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(SqliteDialect(path, timeout_s), clock)


class _SqliteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._db.execute(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._db.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._db.execute(sql, params).fetchall()

    def json(self, value: object) -> Any:
        return None if value is None else json.dumps(value, allow_nan=False)

    def parsed(self, value: Any) -> Any:
        return None if value is None else json.loads(value)


class SqliteDialect:
    name: DialectName = "sqlite"

    def __init__(
        self, path: Path, timeout_s: float, *, synchronous: Literal["FULL", "NORMAL"] = "FULL"
    ) -> None:
        """``synchronous``: SQLite's; NORMAL (in WAL) fsyncs at checkpoints only, so a power
        loss may take the last commits, though always a suffix of them, never a middle one."""
        self.path = path
        self.timeout_s = timeout_s
        self._pragmas = f"PRAGMA foreign_keys=ON; PRAGMA synchronous={synchronous}"
        with self._connection() as db:
            enable_wal(db, timeout_s)

    def close(self) -> None:
        """Nothing held: each call opens its own connection (a file open, cheap)."""

    @contextmanager
    def read(self) -> Iterator[_SqliteTx]:
        with self._connection() as db:
            db.execute("BEGIN")
            try:
                yield _SqliteTx(db)
            finally:
                db.execute("ROLLBACK")  # a read wrote nothing to keep

    @contextmanager
    def write(self, *, lock: bool = True) -> Iterator[_SqliteTx]:
        """SQLite has one write lock: every write takes it, ``lock`` or not."""
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(db)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite ends some failed transactions itself
                    db.execute("ROLLBACK")
                raise

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        except sqlite3.OperationalError as exc:
            raise RegistryUnavailable(f"cannot open the registry at {self.path}: {exc}") from exc
        try:
            db.executescript(self._pragmas)
            yield db
        except sqlite3.IntegrityError as exc:  # a schema check no rule here foresaw
            raise RegistryError(f"the registry refused the write: {exc}") from exc
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _UNAVAILABLE:
                raise
            raise RegistryUnavailable(f"the registry at {self.path}: {exc}") from exc
        finally:
            db.close()
