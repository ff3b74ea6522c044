"""Switching a SQLite file to WAL, as the registry and the embedded ledger both do."""

from __future__ import annotations

import sqlite3
import time


def enable_wal(db: sqlite3.Connection, timeout_s: float = 10.0) -> None:
    """Switch the file to WAL (once: the mode is stored in it).

    The switch needs the write lock, and when another connection is opening the same
    new file SQLite answers "database is locked" at once instead of waiting (its rule
    against two readers deadlocking as both upgrade), so ask again until the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode=WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)  # poll interval of the lock wait above
            continue
        if mode != "wal":
            raise sqlite3.OperationalError(f"the journal mode stays {mode!r}, not 'wal'")
        return
