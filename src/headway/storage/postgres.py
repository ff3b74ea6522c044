"""The dialect on PostgreSQL (psycopg 3, synchronous): one connection, opened on first use
and used by one call at a time (calls come from threads: ``asyncio.to_thread``); a
connection that fails is closed and the next call opens another. Reads run in one
``REPEATABLE READ, READ ONLY`` transaction (one snapshot for all their statements).
Writes run at READ COMMITTED and, unless told otherwise, take
``pg_advisory_xact_lock(WRITE_LOCK_KEY)`` first, released at commit: such writes are
serialized, and each statement after the lock sees every write committed before it, so
what a write checks cannot change under it."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from headway.storage.dialect import DialectName, Row
from headway.storage.errors import STORAGE, Failures

WRITE_LOCK_KEY = 0x6865_6164_7761_7952  # "headwayR": held by the registry write in progress


class _PostgresTx:
    def __init__(self, cursor: psycopg.Cursor[Row]) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._run(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return self._run(sql, params).fetchone()

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._run(sql, params).fetchall()

    def json(self, value: object) -> Any:
        return None if value is None else Jsonb(value)

    def parsed(self, value: Any) -> Any:
        return value  # psycopg loads jsonb itself

    def _run(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Row]:
        # The statements hold no literal "?" or "%": placeholders are the only ones.
        if params:
            return self._cursor.execute(sql.replace("?", "%s"), params)
        return self._cursor.execute(sql)


class PostgresDialect:
    name: DialectName = "postgres"

    def __init__(self, url: str, connect_timeout_s: float, *, failures: Failures = STORAGE) -> None:
        self.url = url
        self._failures = failures
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Row] | None = None

    @contextmanager
    def read(self) -> Iterator[_PostgresTx]:
        with (
            self._connection(read_only=True) as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            yield _PostgresTx(cursor)

    @contextmanager
    def write(self, *, lock: bool = True) -> Iterator[_PostgresTx]:
        with (
            self._connection(read_only=False) as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            tx = _PostgresTx(cursor)
            if lock:
                tx.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK_KEY,))
            yield tx

    def close(self) -> None:
        with self._lock:
            self._drop()

    @contextmanager
    def _connection(self, *, read_only: bool) -> Iterator[psycopg.Connection[Row]]:
        with self._lock:
            conn = self._open()
            try:
                conn.isolation_level = (
                    psycopg.IsolationLevel.REPEATABLE_READ
                    if read_only
                    else psycopg.IsolationLevel.READ_COMMITTED
                )
                conn.read_only = read_only
                yield conn
            except psycopg.IntegrityError as exc:  # a schema check no rule here foresaw
                raise self._failures.refused(
                    f"{self._failures.what} refused the write: {exc}"
                ) from exc
            except psycopg.OperationalError as exc:
                self._drop()
                raise self._failures.unavailable(
                    f"{self._failures.what} on Postgres failed mid-call: {exc}"
                ) from exc

    def _open(self) -> psycopg.Connection[Row]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            self._conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, round(self.connect_timeout_s))
            )
        except psycopg.OperationalError as exc:
            raise self._failures.unavailable(
                f"cannot connect to {self._failures.what} on Postgres: {exc}"
            ) from exc
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
