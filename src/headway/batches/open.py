"""The batch store a process uses: Postgres in shared mode (``postgres_url``), else the
SQLite file ``batches_path`` (WAL: gateways read while an executor writes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from headway.batches.sql import SqlBatchStore, batch_store_errors
from headway.batches.store import BatchStore
from headway.registry.postgres import PostgresDialect
from headway.registry.sqlite import SqliteDialect
from headway.settings import Settings


def open_batch_store(settings: Settings) -> BatchStore:
    if settings.postgres_url:
        return postgres_batch_store(settings.postgres_url)
    return sqlite_batch_store(settings.batches_path)


def sqlite_batch_store(
    path: Path,
    *,
    timeout_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    page_lines: int = 1000,
) -> SqlBatchStore:
    """A connection per call (a ``SqlBatchStore`` is safe to share between threads);
    ``timeout_s``: how long a call waits for the file's write lock.

    ``synchronous=NORMAL``: a commit is not fsynced on its own (WAL: at checkpoints), so a
    line costs no fsync here. A process killed loses nothing (the OS has the writes); a
    power loss can lose only the last commits, and the work queue shares this file's WAL,
    so an ack never outlives the result it followed (``sqlite_queue.py``): a line whose
    result was lost is run again and billed once (its request id)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with batch_store_errors():
        dialect = SqliteDialect(path, timeout_s, synchronous="NORMAL")
    return SqlBatchStore(dialect, clock=clock, page_lines=page_lines)


def postgres_batch_store(
    url: str,
    *,
    connect_timeout_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    page_lines: int = 1000,
) -> SqlBatchStore:
    """One connection, opened on first use and used by one call at a time; ``close``
    it when done."""
    return SqlBatchStore(
        PostgresDialect(url, connect_timeout_s), clock=clock, page_lines=page_lines
    )
