"""The ledger in one SQLite file: embedded mode, one consumer on one machine.

One thread owns the connection: every call is a function of that connection, run on
a single-worker executor, so the event loop never blocks on the disk and calls are
serialized (one writer is all SQLite allows anyway). Writes run in ``BEGIN
IMMEDIATE`` transactions, holding the write lock from the start, with WAL and
``synchronous=FULL``: a committed batch survives a power cut, and readers in other
processes (``headway usage``) read while the consumer writes.

``apply`` keeps the invariant of ``base.py``: the batch is first reduced to the first
event of each request id (``first_of_each``); each is inserted with ``ON CONFLICT
(request_id) DO NOTHING``, and only those SQLite reports as inserted (``rowcount``) are
summed into ``hourly_usage`` by relative upserts, in the same transaction as the dead
letters; the hours it added to that export planning already passed (below the
watermark) are recorded as late, for the next plan (``migrations.py``, migration 3).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from headway.billing.ledger.backup import LedgerInUse, hold_shared
from headway.billing.ledger.base import (
    Applied,
    DeadLetter,
    ExportIntent,
    HourlyUsage,
    UsageQuery,
    UsageRow,
)
from headway.billing.ledger.errors import LedgerError, LedgerUnavailable, UnknownIntent
from headway.billing.ledger.memory import (
    HourKey,
    Sums,
    aggregate_problems,
    bounded_key,
    check_adoption,
    first_of_each,
    floor_hour,
    hour_range,
    hourly_sums,
    keyed_sums,
    late_hours,
    new_intents,
    next_watermark,
    overlong,
)
from headway.billing.ledger.migrations import migrate_sqlite
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent
from headway.storage.sqlite_wal import enable_wal

T = TypeVar("T")

_INSERT_PROCESSED = (
    "INSERT INTO processed_requests (request_id, tenant_id, tenant, key_id, endpoint, alias,"
    " version, tier, texts, tokens, outcome, billable, queue_s, inference_s, total_s,"
    " gateway_id, at, hour, recorded_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (request_id) DO NOTHING"
)
_KEY = "tenant_id, tenant, alias, version, endpoint, tier, hour"
_ADD = (
    " ON CONFLICT (tenant_id, tenant, alias, version, endpoint, tier, hour) DO UPDATE SET"
    " requests = requests + excluded.requests, texts = texts + excluded.texts,"
    " tokens = tokens + excluded.tokens"
)
_ADD_HOURLY = (
    f"INSERT INTO hourly_usage ({_KEY}, requests, texts, tokens)"
    f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?){_ADD}"
)
_USAGE = {
    "hour": "SELECT tenant_id, tenant, hour AS period, NULL, NULL, {sums} FROM hourly_usage"
    " WHERE {where} GROUP BY tenant_id, tenant, hour ORDER BY tenant_id, tenant, period",
    "day": "SELECT tenant_id, tenant, hour - hour % 86400 AS period, NULL, NULL, {sums}"
    " FROM hourly_usage WHERE {where} GROUP BY tenant_id, tenant, period"
    " ORDER BY tenant_id, tenant, period",
    "model": "SELECT tenant_id, tenant, :period, alias, version, {sums} FROM hourly_usage"
    " WHERE {where} GROUP BY tenant_id, tenant, alias, version"
    " ORDER BY tenant_id, tenant, alias, version",
}
_SUMS = "SUM(requests), SUM(texts), SUM(tokens)"
_IN_RANGE = "hour >= :low AND hour < :high AND (:tenant IS NULL OR tenant_id = :tenant)"
_ORDER = "hour, tenant_id, tenant, alias, version, endpoint, tier"
_INTENT = "key, tenant_id, tenant, hour, meter, revision, quantity, sent_at"
_PLANNED = "((hour >= :low AND hour < :high) OR hour IN (SELECT hour FROM export_late_hours))"
"""The hours a plan reads: from the watermark to the last closed one, and the late ones."""
_LEGACY = f"tenant_id = {LEGACY_TENANT_ID} AND tenant = :tenant"
_ADOPT = (
    # Relative upserts into the id's rows, then the legacy rows go; ``WHERE true`` tells
    # SQLite's parser that ON CONFLICT is the upsert's, not the join's.
    f"INSERT INTO hourly_usage ({_KEY}, requests, texts, tokens)"
    " SELECT :tenant_id, tenant, alias, version, endpoint, tier, hour, requests, texts, tokens"
    f" FROM hourly_usage WHERE {_LEGACY} AND true ORDER BY {_ORDER}{_ADD}",
    f"DELETE FROM hourly_usage WHERE {_LEGACY}",
    f"UPDATE export_intents SET tenant_id = :tenant_id WHERE {_LEGACY}",
)


class SQLiteLedger:
    """The ``Ledger`` protocol on one SQLite file; build it with ``await open(path)``."""

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        db: sqlite3.Connection,
        clock: Callable[[], float],
        lock_fd: int | None = None,
    ) -> None:
        """``lock_fd``: the ledger's shared lock (``backup.hold_shared``), let go on close."""
        self._lock_fd = lock_fd
        self._executor = executor
        self._db = db
        """Used only on the executor's thread, which created it."""
        self._clock = clock
        self._closed = False

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SQLiteLedger:
        """Open (creating) the file at ``path`` and apply the missing migrations, holding
        its lock shared while open (a restore waits for it; ``LedgerUnavailable`` while
        a restore holds it)."""
        try:
            lock_fd = hold_shared(path)
        except LedgerInUse as exc:
            raise LedgerUnavailable(str(exc)) from exc
        except OSError as exc:
            raise LedgerUnavailable(f"cannot lock the SQLite ledger at {path}: {exc}") from exc
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headway-ledger")
        try:
            db = await asyncio.get_running_loop().run_in_executor(executor, _connect, path, clock)
        except (sqlite3.Error, OSError) as exc:
            executor.shutdown()
            os.close(lock_fd)
            raise LedgerUnavailable(f"cannot open the SQLite ledger at {path}: {exc}") from exc
        except BaseException:
            executor.shutdown()
            os.close(lock_fd)
            raise
        return cls(executor, db, clock, lock_fd)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise LedgerError("the SQLite ledger is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work, self._db)
        except sqlite3.OperationalError as exc:  # locked past the timeout, disk full, I/O
            raise LedgerUnavailable(f"the SQLite ledger failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise LedgerError(f"the SQLite ledger refused the call: {exc}") from exc

    async def apply(self, events: Sequence[UsageEvent], dead: Sequence[DeadLetter]) -> Applied:
        now = self._clock()
        unique = first_of_each(events)

        def write(db: sqlite3.Connection) -> int:
            with _write(db):
                new = [
                    event
                    for event in unique
                    if db.execute(_INSERT_PROCESSED, _processed_row(event, now)).rowcount == 1
                ]
                sums = hourly_sums(new)
                db.executemany(_ADD_HOURLY, [(*key, *row) for key, row in sums.items()])
                _mark_late(db, late_hours(sums, _watermark(db)))
                db.executemany(
                    "INSERT INTO dead_letters (data, reason, source, recorded_at)"
                    " VALUES (?, ?, ?, ?)",
                    [(letter.data, letter.reason, letter.source, now) for letter in dead],
                )
            return len(new)

        new = await self._run(write) if unique or dead else 0
        return Applied(new=new, duplicates=len(events) - new, dead=len(dead))

    async def usage(self, query: UsageQuery) -> list[UsageRow]:
        low, high = hour_range(query.start, query.end)
        sql = _USAGE[query.group_by].format(sums=_SUMS, where=_IN_RANGE)
        params = {
            "low": low,
            "high": high,
            "tenant": query.tenant_id,
            "period": floor_hour(query.start),
        }
        rows = await self._run(lambda db: db.execute(sql, params).fetchall())
        return [UsageRow(*row) for row in rows]

    async def hours(self, start: float, end: float, tenant_id: int | None) -> list[HourlyUsage]:
        low, high = hour_range(start, end)
        sql = (
            f"SELECT {_KEY}, requests, texts, tokens FROM hourly_usage WHERE {_IN_RANGE}"
            f" ORDER BY {_ORDER}"
        )
        params = {"low": low, "high": high, "tenant": tenant_id}
        rows = await self._run(lambda db: db.execute(sql, params).fetchall())
        return [HourlyUsage(*row) for row in rows]

    async def plan_exports(self, closed_before: float) -> list[ExportIntent]:
        """One ``BEGIN IMMEDIATE`` transaction: no write (a late event, another planner)
        lands between reading the totals and recording the intents. Only the hours from
        the watermark to ``closed_before`` and the late ones are read."""
        closed = floor_hour(closed_before)
        now = self._clock()

        def plan(db: sqlite3.Connection) -> list[ExportIntent]:
            with _write(db):
                hours = {"low": _watermark(db), "high": closed}
                totals = db.execute(
                    "SELECT tenant_id, tenant, hour, SUM(texts), SUM(tokens) FROM hourly_usage"
                    f" WHERE {_PLANNED} GROUP BY tenant_id, tenant, hour",
                    hours,
                ).fetchall()
                reported = db.execute(
                    "SELECT tenant_id, tenant, hour, meter, SUM(quantity), COUNT(*)"
                    f" FROM export_intents WHERE {_PLANNED}"
                    " GROUP BY tenant_id, tenant, hour, meter",
                    hours,
                ).fetchall()
                intents = new_intents(
                    {(row[0], row[1], row[2]): (row[3], row[4]) for row in totals},
                    {(row[0], row[1], row[2], row[3]): (row[4], row[5]) for row in reported},
                )
                db.executemany(
                    "INSERT INTO export_intents (key, tenant_id, tenant, hour, meter, revision,"
                    " quantity, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (i.key, i.tenant_id, i.tenant, i.hour, i.meter, i.revision, i.quantity, now)
                        for i in intents
                    ],
                )
                db.execute(
                    "UPDATE export_watermark SET planned_before = ?",
                    (next_watermark(hours["low"], closed_before),),
                )
                db.execute("DELETE FROM export_late_hours")
                unsent = db.execute(
                    f"SELECT {_INTENT} FROM export_intents WHERE sent_at IS NULL"
                    " ORDER BY hour, tenant_id, tenant, meter, revision, key"
                ).fetchall()
                return [_bounded(db, ExportIntent(*row)) for row in unsent]

        return await self._run(plan)

    async def mark_sent(self, key: str, at: float) -> None:
        def mark(db: sqlite3.Connection) -> bool:
            with _write(db):
                db.execute(
                    "UPDATE export_intents SET sent_at = ? WHERE key = ? AND sent_at IS NULL",
                    (at, key),
                )
                found = db.execute("SELECT 1 FROM export_intents WHERE key = ?", (key,))
                return found.fetchone() is not None

        if not await self._run(mark):
            raise UnknownIntent(f"no export intent has key {key!r}")

    async def adopt_legacy(self, tenant: str, tenant_id: int) -> int:
        check_adoption(tenant_id)
        params = {"tenant": tenant, "tenant_id": tenant_id}

        def adopt(db: sqlite3.Connection) -> int:
            with _write(db):
                moved = db.execute(
                    f"UPDATE processed_requests SET tenant_id = :tenant_id WHERE {_LEGACY}",
                    params,
                ).rowcount
                for statement in _ADOPT:
                    db.execute(statement, params)
                adopted = db.execute(
                    "SELECT DISTINCT hour FROM hourly_usage WHERE tenant_id = ? AND tenant = ?",
                    (tenant_id, tenant),
                ).fetchall()
                hours = [(0, "", "", "", "", "", row[0]) for row in adopted]
                _mark_late(db, late_hours(hours, _watermark(db)))
            return moved

        return await self._run(adopt)

    async def check_aggregates(self) -> list[str]:
        """Both sides read in one transaction: one snapshot, whatever commits meanwhile."""

        def read(db: sqlite3.Connection) -> tuple[dict[HourKey, Sums], dict[HourKey, Sums]]:
            db.execute("BEGIN")
            try:
                expected = db.execute(
                    f"SELECT {_KEY}, COUNT(*), SUM(texts), SUM(tokens) FROM processed_requests"
                    f" WHERE billable GROUP BY {_KEY}"
                ).fetchall()
                stored = db.execute(
                    f"SELECT {_KEY}, requests, texts, tokens FROM hourly_usage"
                ).fetchall()
            finally:
                db.execute("COMMIT")
            return keyed_sums(expected), keyed_sums(stored)

        expected, stored = await self._run(read)
        return aggregate_problems(expected, stored)

    async def counts(self) -> dict[str, int]:
        processed, billable, dead = await self._run(
            lambda db: db.execute(
                "SELECT (SELECT COUNT(*) FROM processed_requests),"
                " (SELECT COUNT(*) FROM processed_requests WHERE billable),"
                " (SELECT COUNT(*) FROM dead_letters)"
            ).fetchone()
        )
        return {"processed": processed, "billable": billable, "dead": dead}

    async def processed_ids(self) -> dict[str, int]:
        rows = await self._run(
            lambda db: db.execute(
                "SELECT request_id, COUNT(*) FROM processed_requests GROUP BY request_id"
            ).fetchall()
        )
        return dict(rows)

    async def close(self) -> None:
        if self._closed:
            return
        await self._run(lambda db: db.close())
        self._closed = True
        self._executor.shutdown()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _connect(path: Path, clock: Callable[[], float]) -> sqlite3.Connection:
    """On the ledger's thread: the connection it will own, migrated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        enable_wal(db)
        db.execute("PRAGMA synchronous=FULL")
        migrate_sqlite(db, clock=clock)
    except BaseException:
        db.close()
        raise
    return db


def _bounded(db: sqlite3.Connection, intent: ExportIntent) -> ExportIntent:
    """``intent``, rekeyed first if its key is ``overlong`` (never accepted, so never
    counted: safe to send under another key)."""
    if not overlong(intent.key):
        return intent
    key = bounded_key(intent)
    db.execute("UPDATE export_intents SET key = ? WHERE key = ?", (key, intent.key))
    return replace(intent, key=key)


def _watermark(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT planned_before FROM export_watermark").fetchone()
    return int(row[0])


def _mark_late(db: sqlite3.Connection, hours: Sequence[int]) -> None:
    db.executemany(
        "INSERT INTO export_late_hours (hour) VALUES (?) ON CONFLICT DO NOTHING",
        [(hour,) for hour in hours],
    )


@contextmanager
def _write(db: sqlite3.Connection) -> Iterator[None]:
    """One transaction holding the write lock from its start; any error rolls it back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _processed_row(event: UsageEvent, recorded_at: float) -> tuple[object, ...]:
    return (
        event.request_id,
        event.tenant_id,
        event.tenant,
        event.key_id,
        event.endpoint,
        event.alias,
        event.version,
        event.tier,
        event.texts,
        event.tokens,
        event.outcome,
        event.billable,
        event.queue_s,
        event.inference_s,
        event.total_s,
        event.gateway_id,
        event.at,
        event.hour,
        recorded_at,
    )
