"""The dialect on a SQLite file: a connection per call (a file open, cheap), so a dialect
is safe to share between threads; WAL, so readers read while a writer writes. Reads run
in one deferred transaction (one consistent view); writes in ``BEGIN IMMEDIATE``, which
takes the write lock before the first read."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from headway.storage.dialect import DialectName, Row
from headway.storage.errors import STORAGE, Failures
from headway.storage.sqlite_wal import enable_wal

_UNAVAILABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN})
"""Primary result codes of a database that is there but cannot be had now."""


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
        self,
        path: Path,
        timeout_s: float,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        failures: Failures = STORAGE,
    ) -> None:
        """``synchronous``: SQLite's; NORMAL (in WAL) fsyncs at checkpoints only, so a power
        loss may take the last commits, though always a suffix of them, never a middle one."""
        self.path = path
        self._failures = failures
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
            raise self._failures.unavailable(
                f"cannot open {self._failures.what} at {self.path}: {exc}"
            ) from exc
        try:
            db.executescript(self._pragmas)
            yield db
        except sqlite3.IntegrityError as exc:  # a schema check no rule here foresaw
            raise self._failures.refused(f"{self._failures.what} refused the write: {exc}") from exc
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _UNAVAILABLE:
                raise
            raise self._failures.unavailable(
                f"{self._failures.what} at {self.path}: {exc}"
            ) from exc
        finally:
            db.close()
