"""The work queue in embedded mode: a table of the batch store's SQLite file.

One row per queued line, ``PRIMARY KEY (batch_id, line)``, so a line queued already is not
queued again (``INSERT OR IGNORE``). A row is visible when ``visible_at <= now`` (unix time:
several processes share the file). ``pull`` claims up to n visible rows in one ``BEGIN
IMMEDIATE``, setting ``visible_at = now + lease_s``, counting the attempt and stamping a
fresh random ``lease_id``, so two pullers never claim a row while its lease holds; it polls,
``poll_s`` backing off to ``max_poll_s``, until ``wait_s``.

**Round robin by tenant** (``fair.py``): the claim walks the tenants with rows on the
index ``(tenant_id, tenant)``, one seek each, from just after the tenant this object
served last, takes each one's oldest visible rows within its ``Room``, and stops once n
tenants offered some; rows go out one per tenant a round. A pull's cost does not grow
with what a tenant has queued (its leased rows are its oldest, so the scan past them is
its lines in flight). Rows the previous version queued have ``tenant_id`` 0 and take
turns by name until drained; ``_migrate`` adds the column and the index.

**Leases.** ``ack`` deletes, ``nak`` delays and ``touch`` extends a row only while its
``lease_id`` is the delivery's own: once another executor claimed it, a late ack changes
nothing (``stale_leases``); an ack after the lease ran out but before a new claim still
deletes it.

WAL with ``synchronous=NORMAL``: a ``put`` or ``ack`` is made durable by the batch store's
next FULL commit in the same file (the mover's move after its puts, the executor's results
before their acks), and no client is answered on a queue commit. SQLite calls run in a
thread, one at a time on this object's connection. A write lock held elsewhere is retried
every ``_LOCK_RETRY_S``, not by SQLite's busy handler, whose ever longer sleeps let an
executor acking in a tight loop starve the others of the lock.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from headway.batches.fair import round_robin
from headway.batches.queue import (
    ANY_ROOM,
    Delivery,
    Room,
    WorkItem,
    WorkQueueError,
    check_owned,
)
from headway.storage.sqlite_wal import enable_wal

T = TypeVar("T")
Key = tuple[int, str]
"""A tenant's turn in the rotation: (tenant_id, name); rows of the previous version (id 0)
take theirs by name."""

_TABLE = """
CREATE TABLE IF NOT EXISTS work_items (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    visible_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT,
    tenant_id INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, line)
)
"""
_ADD_TENANT_ID = "ALTER TABLE work_items ADD COLUMN tenant_id INTEGER NOT NULL DEFAULT 0"
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS work_items_by_tenant_id ON work_items (tenant_id, tenant)",
    "DROP INDEX IF EXISTS work_items_by_tenant",  # by name: the previous version's
)
_PUT = (
    "INSERT OR IGNORE INTO work_items"
    " (batch_id, line, tenant_id, tenant, visible_at, attempts, lease_id)"
    " VALUES (?, ?, ?, ?, ?, 0, NULL)"
)
_FIRST_TENANT = "SELECT tenant_id, tenant FROM work_items ORDER BY tenant_id, tenant LIMIT 1"
_NEXT_TENANT = (
    "SELECT tenant_id, tenant FROM work_items WHERE (tenant_id, tenant) > (?, ?)"
    " ORDER BY tenant_id, tenant LIMIT 1"
)
_VISIBLE = (
    "SELECT rowid, batch_id, line, attempts FROM work_items"
    " WHERE tenant_id = ? AND tenant = ? AND visible_at <= ? ORDER BY rowid LIMIT ?"
)
_LEASE = (
    "UPDATE work_items SET visible_at = ?, attempts = attempts + 1, lease_id = ? WHERE rowid = ?"
)
_ACK = "DELETE FROM work_items WHERE batch_id = ? AND line = ? AND lease_id = ?"
_NAK = (
    "UPDATE work_items SET visible_at = ?, lease_id = NULL"
    " WHERE batch_id = ? AND line = ? AND lease_id = ?"
)
_TOUCH = "UPDATE work_items SET visible_at = ? WHERE batch_id = ? AND line = ? AND lease_id = ?"
_DROP = "DELETE FROM work_items WHERE batch_id = ?"
_DEPTH = "SELECT count(*) FROM work_items"
_LOCK_RETRY_S = 0.0005  # between tries of the write lock another connection holds


class SqliteWorkQueue:
    """A ``WorkQueue`` in an SQLite file shared by processes (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        lease_s: float,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = 10.0,
        poll_s: float = 0.05,
        max_poll_s: float = 0.25,
    ) -> None:
        if lease_s <= 0:
            raise WorkQueueError(f"the work queue's lease must be positive, not {lease_s} s")
        self.path = path
        self._lease_s = lease_s
        self._clock = clock
        self._busy_timeout_s = busy_timeout_s
        self._poll_s = poll_s
        self._max_poll_s = max_poll_s
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._after: Key | None = None
        """The tenant this object's last pull served last (the rotation goes on after it)."""
        self.stale_leases = 0
        """Acks, naks and touches that found the row gone or held under another lease."""

    @property
    def lease_s(self) -> float:
        return self._lease_s

    async def put(self, items: Sequence[WorkItem]) -> None:
        check_owned(items)
        if not items:
            return
        now = self._clock()
        rows = [(item.batch_id, item.line, item.tenant_id, item.tenant, now) for item in items]
        await asyncio.to_thread(self._call, lambda conn: _write(conn, _PUT, rows))

    async def pull(self, max_items: int, wait_s: float, room: Room = ANY_ROOM) -> list[Delivery]:
        if max_items < 1:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        interval = self._poll_s
        while True:
            claimed = await asyncio.to_thread(
                self._call, lambda conn: self._claim(conn, max_items, room)
            )
            remaining = deadline - loop.time()
            if claimed or remaining <= 0:
                return claimed
            await asyncio.sleep(min(interval, remaining))  # the poll interval (docstring)
            interval = min(interval * 2, self._max_poll_s)

    async def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """One transaction for them all (a group commit of the executor's finished lines)."""
        rows = [(d.item.batch_id, d.item.line, d._lease_id) for d in _own(deliveries)]
        if rows:
            changed = await asyncio.to_thread(self._call, lambda conn: _write(conn, _ACK, rows))
            self.stale_leases += len(rows) - changed

    async def drop(self, batch_id: str) -> int:
        return await asyncio.to_thread(self._call, lambda conn: _write(conn, _DROP, [(batch_id,)]))

    async def depth(self) -> int:
        return await asyncio.to_thread(
            self._call, lambda conn: int(conn.execute(_DEPTH).fetchone()[0])
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    async def _settle(self, sql: str, first: float | None, item: WorkItem, lease_id: str) -> None:
        """Run an ack (``first`` None), a nak or a touch (``first``: the new visible_at)
        on the row, if it is still held under ``lease_id``."""
        key = (item.batch_id, item.line, lease_id)
        params = key if first is None else (first, *key)
        changed = await asyncio.to_thread(self._call, lambda conn: _write(conn, sql, [params]))
        if not changed:
            self.stale_leases += 1

    def _claim(self, conn: sqlite3.Connection, limit: int, room: Room) -> list[Delivery]:
        now = self._clock()
        lease_id = os.urandom(12).hex()
        conn.execute("BEGIN IMMEDIATE")
        try:
            offered: dict[Key, list[tuple[int, str, int, int]]] = {}
            for tenant in _tenants_after(conn, self._after):
                may = room.of(tenant[0])
                want = limit if may is None else min(limit, may)
                if want <= 0:
                    continue
                rows = conn.execute(_VISIBLE, (*tenant, now, want)).fetchall()
                if rows:
                    offered[tenant] = rows
                    if len(offered) == limit:  # enough for a round of one each
                        break
            order = round_robin([(t, len(rows)) for t, rows in offered.items()], limit)
            taken = [offered[tenant].pop(0) for tenant in order]
            conn.executemany(_LEASE, [(now + self._lease_s, lease_id, row[0]) for row in taken])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if order:
            self._after = order[-1]
        return [
            SqliteDelivery(
                self, WorkItem(batch_id, int(line), *tenant), int(attempts) + 1, lease_id
            )
            for tenant, (_, batch_id, line, attempts) in zip(order, taken, strict=True)
        ]

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise WorkQueueError(f"the work queue {self.path} is closed")
            try:
                if self._conn is None:
                    self._conn = self._open()
                return _retrying_while_locked(
                    self._conn, work, time.monotonic() + self._busy_timeout_s
                )
            except sqlite3.Error as exc:
                raise WorkQueueError(f"work queue {self.path}: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            timeout=0.0,  # lock waits are retried by _retrying_while_locked, not SQLite
            isolation_level=None,  # autocommit: transactions are explicit
            check_same_thread=False,  # used from worker threads, one at a time (the lock)
        )
        try:
            enable_wal(conn, self._busy_timeout_s)
            # The batch store in this file commits FULL (``batches/open.py``); the WAL's
            # order keeps an ack after the result it follows, even across a power loss.
            conn.execute("PRAGMA synchronous=NORMAL")
            deadline = time.monotonic() + self._busy_timeout_s
            _retrying_while_locked(conn, _migrate, deadline)
        except BaseException:
            conn.close()
            raise
        return conn

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class SqliteDelivery:
    """A row claimed by one ``pull``, under that pull's lease token."""

    __slots__ = ("_lease_id", "_queue", "attempts", "item")

    def __init__(self, queue: SqliteWorkQueue, item: WorkItem, attempts: int, lease_id: str):
        self._queue = queue
        self._lease_id = lease_id
        self.item = item
        self.attempts = attempts

    async def ack(self) -> None:
        await self._queue._settle(_ACK, None, self.item, self._lease_id)

    async def nak(self, delay_s: float) -> None:
        visible_at = self._queue._clock() + max(delay_s, 0.0)
        await self._queue._settle(_NAK, visible_at, self.item, self._lease_id)

    async def touch(self) -> None:
        visible_at = self._queue._clock() + self._queue.lease_s
        await self._queue._settle(_TOUCH, visible_at, self.item, self._lease_id)


def _own(deliveries: Sequence[Delivery]) -> list[SqliteDelivery]:
    own = [d for d in deliveries if isinstance(d, SqliteDelivery)]
    if len(own) != len(deliveries):
        raise WorkQueueError("ack_all takes only this queue's deliveries")
    return own


def _migrate(conn: sqlite3.Connection) -> None:
    """The table as this code reads it, in one write transaction (two processes opening
    one file at once: the second finds it done): made, or given ``tenant_id`` (a file
    of the previous version) and the index by id in place of the one by name."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_TABLE)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(work_items)")}
        if "tenant_id" not in columns:
            conn.execute(_ADD_TENANT_ID)
        for statement in _INDEXES:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _tenants_after(conn: sqlite3.Connection, after: Key | None) -> Iterator[Key]:
    """Each tenant with a row once, sorted, from just after ``after`` round to ``after``
    itself; one index seek each."""
    if after is not None:
        tenant = after
        while (row := conn.execute(_NEXT_TENANT, tenant).fetchone()) is not None:
            tenant = (int(row[0]), row[1])
            yield tenant
    row = conn.execute(_FIRST_TENANT).fetchone()
    while row is not None and (after is None or (int(row[0]), row[1]) <= after):
        yield int(row[0]), row[1]
        row = conn.execute(_NEXT_TENANT, row).fetchone()


def _retrying_while_locked(
    conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T], deadline: float
) -> T:
    """``work``, tried again while another connection holds the lock (a transaction
    that failed for it has been rolled back, so trying it again is safe)."""
    while True:
        try:
            return work(conn)
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorname in ("SQLITE_BUSY", "SQLITE_LOCKED")
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(_LOCK_RETRY_S)


def _write(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[object]]) -> int:
    """``sql`` for every row in one write transaction; the rows it changed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        changed = conn.executemany(sql, rows).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(changed)
