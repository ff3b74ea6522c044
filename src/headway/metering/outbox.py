"""The gateway's usage outbox: an SQLite file where an event is durable before the 200.

One file per gateway (``<gateway id>.sqlite3``), WAL with ``synchronous=FULL``: once
``record`` returns, the event survives a killed gateway or a power loss.

**Group commit.** One writer thread owns the write connection and the depth. ``record``
queues the event and awaits a future the writer settles only after the commit that holds it
(up to ``max_group`` writes in one ``BEGIN IMMEDIATE`` … ``COMMIT``): requests arriving
together share one fsync, and a failed commit raises ``OutboxError`` in each of its waiters,
none left hanging and none told its event is durable. ``remove`` takes the same queue, so
the relay never competes with the request path for SQLite's write lock.

**Depth**, the events not yet removed, is exact for the writer's own writes and re-read at
most every ``refresh_s`` (and after each removal), since the embedded billing consumer
removes rows from another process (``OutboxFile``). The re-read is the id span, two B-tree
descents where ``count(*)`` reads every page: rows leave in id order, so the span is the
count, and a hole left by a partly failed batch only overestimates it, which errs toward
refusing work early, never toward serving work that cannot be billed.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from headway.metering.event import UsageEvent, encode

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL,
    data BLOB NOT NULL,
    created_at REAL NOT NULL
)
"""
_INSERT = "INSERT INTO outbox (request_id, data, created_at) VALUES (?, ?, ?)"
_DELETE = "DELETE FROM outbox WHERE id = ?"
_SPAN = "SELECT (SELECT min(id) FROM outbox), (SELECT max(id) FROM outbox)"
_READ = "SELECT id, request_id, data, created_at FROM outbox WHERE id > ? ORDER BY id LIMIT ?"
_LOCK_RETRY_S = 0.0005  # between tries of the write lock held by another process

T = TypeVar("T")


class OutboxError(RuntimeError):
    """The outbox could not make an event durable: its commit failed, or it is closed."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    request_id: str
    data: bytes
    """The event as ``metering.event.encode`` wrote it."""
    created_at: float
    """Unix time the event was handed to the outbox."""


class OutboxRows(Protocol):
    """What the relay needs of an outbox: ``Outbox`` in the gateway, ``OutboxFile`` outside."""

    async def read(self, after_id: int, limit: int) -> list[OutboxRow]: ...

    async def remove(self, ids: Sequence[int]) -> int: ...


def connect(path: Path, *, create: bool, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), fsyncing each commit."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        target, uri = str(path), False
    else:
        target, uri = path.absolute().as_uri() + "?mode=rw", True
    try:
        conn = sqlite3.connect(
            target, uri=uri, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        if create:
            conn.execute(SCHEMA)
    except sqlite3.Error as exc:
        raise OutboxError(f"cannot open the usage outbox {path}: {exc}") from exc
    return conn


def span(conn: sqlite3.Connection) -> int:
    """Rows from the oldest to the newest still in the file (the count, when rows leave
    in id order)."""
    oldest, newest = conn.execute(_SPAN).fetchone()
    return 0 if oldest is None else int(newest) - int(oldest) + 1


class OutboxFile:
    """An existing outbox file, read and trimmed on its own connection (WAL lets it read while
    the writer commits), without a writer thread: the relay's view of its gateway's outbox, or
    the embedded consumer's view of every gateway's. Opened on first use; one SQLite call at a
    time, in a thread."""

    def __init__(self, path: Path, *, busy_timeout_s: float = 10.0) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def read(self, after_id: int, limit: int) -> list[OutboxRow]:
        """Up to ``limit`` rows with ids above ``after_id``, in id order."""
        return await asyncio.to_thread(self._call, lambda conn: read_rows(conn, after_id, limit))

    async def remove(self, ids: Sequence[int]) -> int:
        """Delete these rows (those already gone are skipped); returns how many went."""
        if not ids:
            return 0
        return await asyncio.to_thread(self._call, lambda conn: remove_rows(conn, ids))

    async def depth(self) -> int:
        """Rows still in the file, as the span of their ids (see the module docstring)."""
        return await asyncio.to_thread(self._call, span)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._conn is None:
                self._conn = connect(self.path, create=False, busy_timeout_s=self._busy_timeout_s)
            try:
                return work(self._conn)
            except sqlite3.Error as exc:
                raise OutboxError(f"usage outbox {self.path}: {exc}") from exc

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def read_rows(conn: sqlite3.Connection, after_id: int, limit: int) -> list[OutboxRow]:
    rows = conn.execute(_READ, (after_id, limit)).fetchall()
    return [OutboxRow(row[0], row[1], bytes(row[2]), row[3]) for row in rows]


def remove_rows(conn: sqlite3.Connection, ids: Iterable[int]) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        removed = conn.executemany(_DELETE, ((row_id,) for row_id in ids)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(removed)


@dataclass(slots=True)
class _Append:
    request_id: str
    data: bytes
    created_at: float
    done: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


@dataclass(slots=True)
class _Remove:
    ids: Sequence[int]
    done: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


_Command = _Append | _Remove
_STOP = None  # put last by close(): the writer commits what came before it and ends


class _Inbox:
    """Commands from the event loop to the writer thread, a burst of them for one wake-up (a
    futex and a handoff of the GIL) rather than one each.

    ``put`` appends to a deque (atomic) and sets an event, which wakes the writer only if it
    waits on it. The writer clears the event before it takes, so a command put while it takes
    is taken now or sets the event again: none is left behind, at worst a wake-up finds nothing."""

    def __init__(self) -> None:
        self._items: deque[_Command | None] = deque()
        self._ready = threading.Event()

    def put(self, item: _Command | None) -> None:
        self._items.append(item)
        self._ready.set()

    def wait(self, timeout_s: float) -> bool:
        """True once something may be there; False after ``timeout_s`` of nothing."""
        return self._ready.wait(timeout_s)

    def take(self, limit: int | None) -> tuple[list[_Command], bool]:
        """Up to ``limit`` commands (None: all), in order, and whether ``_STOP`` came."""
        self._ready.clear()
        taken: list[_Command] = []
        items = self._items
        while items and (limit is None or len(taken) < limit):
            item = items.popleft()
            if item is _STOP:
                return taken, True
            taken.append(item)
        if items:
            self._ready.set()  # the rest, next time round
        return taken, False


class Outbox:
    """The usage sink of one gateway (see the module docstring); ``start`` before use."""

    def __init__(
        self,
        path: Path,
        *,
        max_events: int = 1_000_000,
        max_group: int = 10_000,
        refresh_s: float = 1.0,
        lock_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.max_events = max_events
        self._max_group = max_group
        self._refresh_s = refresh_s
        self._lock_timeout_s = lock_timeout_s
        self._clock = clock
        self._queue = _Inbox()
        self._reader = OutboxFile(path)
        self._conn: sqlite3.Connection | None = None
        self._writer: threading.Thread | None = None
        self._accepting = False
        self._depth = 0
        self._full = False
        self._refreshed_at = 0.0
        self.commits = 0
        """Transactions committed so far (each one fsync); ``record`` calls share them."""

    @property
    def depth(self) -> int:
        """Events not yet removed (by this process or another; see the module docstring)."""
        return self._depth

    @property
    def full(self) -> bool:
        return self._full

    async def start(self) -> None:
        await asyncio.to_thread(self._open)
        self._accepting = True
        self._writer = threading.Thread(
            target=self._write_loop, name=f"outbox-writer {self.path.name}", daemon=True
        )
        self._writer.start()

    async def record(self, event: UsageEvent) -> None:
        """Returns once the event is committed and fsynced; ``OutboxError`` if it is not."""
        if not self._accepting:
            raise OutboxError(f"the usage outbox {self.path} is not open")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Append(event.request_id, encode(event), self._clock(), done, loop))
        await done

    async def read(self, after_id: int, limit: int) -> list[OutboxRow]:
        """Up to ``limit`` committed rows with ids above ``after_id``, in id order."""
        return await self._reader.read(after_id, limit)

    async def remove(self, ids: Sequence[int]) -> int:
        """Delete these rows in the writer's next commit; returns how many went."""
        if not ids:
            return 0
        if not self._accepting:
            raise OutboxError(f"the usage outbox {self.path} is not open")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        self._queue.put(_Remove(ids, done, loop))
        return await done

    async def close(self) -> None:
        """Commit what is queued, then stop the writer; later calls raise ``OutboxError``."""
        self._accepting = False
        if self._writer is not None:
            self._queue.put(_STOP)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        await self._reader.close()

    # The writer thread: everything below runs there, and only there (or before it starts).

    def _open(self) -> None:
        # The writer takes the lock with its own short retries (see _begin), never in
        # SQLite's busy handler, whose sleeps grow to 100 ms.
        self._conn = connect(self.path, create=True, busy_timeout_s=0.0)
        self._refresh_depth()

    def _write_loop(self) -> None:
        assert self._conn is not None
        try:
            while True:
                if not self._queue.wait(self._refresh_s):
                    self._refresh_depth()
                    continue
                group, stop = self._queue.take(self._max_group)
                if group:
                    self._commit(group)
                if stop:
                    return
                if time.monotonic() - self._refreshed_at >= self._refresh_s:
                    self._refresh_depth()
        finally:
            self._accepting = False  # a writer that died of a bug takes no more waiters
            self._conn.close()
            self._fail_leftovers()

    def _commit(self, group: list[_Command]) -> None:
        assert self._conn is not None
        appends = [command for command in group if isinstance(command, _Append)]
        removals = [command for command in group if isinstance(command, _Remove)]
        removed: list[int] = []
        try:
            self._begin()
            try:
                self._conn.executemany(
                    _INSERT, [(a.request_id, a.data, a.created_at) for a in appends]
                )
                for removal in removals:
                    cursor = self._conn.executemany(_DELETE, [(i,) for i in removal.ids])
                    removed.append(cursor.rowcount)
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            reason = f"usage outbox {self.path}: commit of {len(group)} writes failed: {exc}"
            _settle([(c.loop, c.done, None) for c in group], reason, exc)
            return
        self.commits += 1
        self._depth += len(appends) - sum(removed)
        if removals:
            self._refresh_depth()
        self._note_fullness()
        _settle(
            [(a.loop, a.done, None) for a in appends]
            + [(r.loop, r.done, count) for r, count in zip(removals, removed, strict=True)],
            None,
            None,
        )

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, retried every half millisecond while another process (the
        embedded consumer trimming this file) holds the write lock."""
        assert self._conn is not None
        deadline = time.monotonic() + self._lock_timeout_s
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorname in ("SQLITE_BUSY", "SQLITE_LOCKED")
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(_LOCK_RETRY_S)

    def _refresh_depth(self) -> None:
        assert self._conn is not None
        self._refreshed_at = time.monotonic()
        try:
            self._depth = span(self._conn)
        except sqlite3.Error:
            log.warning("usage outbox %s: cannot read its depth", self.path, exc_info=True)
            return
        self._note_fullness()

    def _note_fullness(self) -> None:
        # Full at the bound, room again only below 90% of it: at the bound, with a slow
        # relay, it would otherwise flip (and log) with every batch relayed.
        full = self._depth >= (self.max_events if not self._full else 0.9 * self.max_events)
        if full == self._full:
            return
        self._full = full
        if full:
            log.warning(
                "usage outbox %s is full (%d events, bound %d): refusing billable work "
                "until the relay drains it",
                self.path,
                self._depth,
                self.max_events,
            )
        else:
            log.warning(
                "usage outbox %s has room again (%d events, bound %d)",
                self.path,
                self._depth,
                self.max_events,
            )

    def _fail_leftovers(self) -> None:
        leftovers, _ = self._queue.take(None)
        _settle(
            [(c.loop, c.done, None) for c in leftovers],
            f"the usage outbox {self.path} is closed",
            None,
        )


_Settlement = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", object]


def _settle(settlements: list[_Settlement], error: str | None, cause: Exception | None) -> None:
    """From the writer thread: resolve each future on its own loop, one wake-up per loop;
    with ``error``, each waiter gets its own ``OutboxError`` (caused by ``cause``)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object]]] = {}
    for loop, future, result in settlements:
        by_loop.setdefault(loop, []).append((future, result))
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, futures, error, cause)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            continue


def _resolve(
    futures: list[tuple[asyncio.Future[Any], object]], error: str | None, cause: Exception | None
) -> None:
    for future, result in futures:
        if future.done():  # its caller was cancelled
            continue
        if error is None:
            future.set_result(result)
        else:
            exc = OutboxError(error)
            exc.__cause__ = cause
            future.set_exception(exc)
