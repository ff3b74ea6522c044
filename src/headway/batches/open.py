"""The batch store a process uses: Postgres in shared mode (``postgres_url``), else the
SQLite file ``batches_path`` (WAL: gateways read while an executor writes; every commit
fsynced)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from headway.batches.sql import SqlBatchStore, batch_store_errors
from headway.batches.store import BatchStore
from headway.settings import Settings
from headway.storage.postgres import PostgresDialect
from headway.storage.sqlite import SqliteDialect


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

    ``synchronous=FULL``: every commit is fsynced before it returns, so what a client was
    answered for survives a power loss (NORMAL in WAL may lose the last commits); the
    fsync's cost is paid once per group of lines the executor records a commit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with batch_store_errors():
        dialect = SqliteDialect(path, timeout_s, synchronous="FULL")
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
