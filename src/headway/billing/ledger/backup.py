"""Backing up and restoring the embedded (SQLite) ledger, safe while the consumer writes.

``backup`` copies with SQLite's online backup API in one read transaction, so the copy is
the ledger as of one commit, whatever the consumer commits meanwhile (in WAL mode a reader
blocks no writer). It is written beside the target, checked (``PRAGMA integrity_check``,
the schema versions, every aggregate against its events), fsynced and only then renamed
into place: a backup that exists is whole.

``restore`` never swaps a ledger in use: every open ``SQLiteLedger`` holds a shared
``flock`` on ``<ledger>.lock``, and restore needs it exclusively (``force`` does not override
that: stop the consumer). Nor does it restore a backup that fails its checks or holds schema
versions this code does not know. Unless ``force``, it refuses a ledger newer than the
backup: restoring would forget the writes since, and forgotten sent marks send reports
again after the provider's 24 h idempotency window. What it replaces is first backed up to
``<keep_dir>/ledger-replaced-<time>.sqlite3``; the copy into the ledger is one transaction
(the old ledger or the restored one, never a mix), checked again.

Postgres is backed up with its own tools (``pg_dump``/``pg_restore``, docs/billing.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from headway.billing.ledger.errors import LedgerError
from headway.billing.ledger.memory import aggregate_problems, keyed_sums
from headway.billing.ledger.migrations import MIGRATIONS


class BackupError(LedgerError):
    """A backup could not be made, checked or restored; the message says why."""


class LedgerInUse(BackupError):
    """Another process has the ledger open (the consumer): stop it first."""


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """What a ledger file holds, checked."""

    path: Path
    versions: tuple[int, ...]
    processed: int
    intents: int
    sent: int
    last_write_at: float
    """The latest recorded_at, created_at or sent_at in it (0: empty)."""


def lock_path(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".lock")


@contextlib.contextmanager
def ledger_lock(ledger: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the ledger's ``flock``: shared while a ledger is open, exclusive to restore;
    ``LedgerInUse`` at once if it cannot be had. The OS drops it when the process dies."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(ledger), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LedgerInUse(
                f"the ledger {ledger} is open in another process (the billing consumer or a"
                " gateway: headway up runs both); stop it first"
            ) from exc
        yield
    finally:
        os.close(fd)


def hold_shared(ledger: Path) -> int:
    """Take the ledger's lock shared, for as long as a ledger is open; the descriptor
    to close to let it go. ``LedgerInUse`` while a restore holds it."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(ledger), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise LedgerInUse(f"the ledger {ledger} is being restored") from exc
    return fd


def summarize(path: Path) -> LedgerSummary:
    """Check a ledger file (integrity, known schema, aggregates = their events) and sum
    it up; ``BackupError`` if it fails any check."""
    if not path.is_file():
        raise BackupError(f"{path} is not a file")
    try:
        db = sqlite3.connect(path, timeout=30)
    except sqlite3.Error as exc:
        raise BackupError(f"{path} cannot be opened: {exc}") from exc
    try:
        return _summarize(db, path)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a readable SQLite ledger: {exc}") from exc
    finally:
        db.close()


def _summarize(db: sqlite3.Connection, path: Path) -> LedgerSummary:
    (integrity,) = db.execute("PRAGMA integrity_check").fetchone()
    if integrity != "ok":
        raise BackupError(f"{path} fails SQLite's integrity check: {integrity}")
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "schema_migrations" not in tables:
        raise BackupError(f"{path} is no headway ledger (no schema_migrations)")
    versions = tuple(v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY 1"))
    unknown = set(versions) - {m.version for m in MIGRATIONS}
    if unknown:
        raise BackupError(
            f"{path} has ledger schema versions {sorted(unknown)} this code does not know;"
            " restore it with the code that wrote it"
        )
    if 2 not in versions:  # the tenant-id keyed checks below need migration 2
        raise BackupError(f"{path} is a ledger older than tenant ids; open it once first")
    key = "tenant_id, tenant, alias, version, endpoint, tier, hour"
    expected = db.execute(
        f"SELECT {key}, COUNT(*), SUM(texts), SUM(tokens) FROM processed_requests"
        f" WHERE billable GROUP BY {key}"
    ).fetchall()
    stored = db.execute(f"SELECT {key}, requests, texts, tokens FROM hourly_usage").fetchall()
    problems = aggregate_problems(keyed_sums(expected), keyed_sums(stored))
    if problems:
        raise BackupError(f"{path}: {len(problems)} aggregates differ from their events")
    processed, intents, sent, last = db.execute(
        "SELECT (SELECT COUNT(*) FROM processed_requests),"
        " (SELECT COUNT(*) FROM export_intents),"
        " (SELECT COUNT(*) FROM export_intents WHERE sent_at IS NOT NULL),"
        " MAX(COALESCE((SELECT MAX(recorded_at) FROM processed_requests), 0),"
        " COALESCE((SELECT MAX(created_at) FROM export_intents), 0),"
        " COALESCE((SELECT MAX(sent_at) FROM export_intents), 0),"
        " COALESCE((SELECT MAX(recorded_at) FROM dead_letters), 0))"
    ).fetchone()
    return LedgerSummary(path, versions, processed, intents, sent, float(last))


def backup(ledger: Path, target: Path) -> LedgerSummary:
    """Copy the ledger at ``ledger`` to ``target`` (which must not exist) while it may be
    written; the copy checked and durable before it gets its name."""
    if not ledger.is_file():
        raise BackupError(f"there is no ledger at {ledger}")
    if target.exists():
        raise BackupError(f"{target} exists; a backup never overwrites a file")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        _copy(ledger, partial)
        summary = summarize(partial)
        _fsync(partial)
        os.rename(partial, target)
        _fsync(target.parent)
    finally:
        partial.unlink(missing_ok=True)
    return replace(summary, path=target)


def restore(
    source: Path, ledger: Path, *, keep_dir: Path, force: bool = False
) -> tuple[LedgerSummary, LedgerSummary | None]:
    """Make the ledger at ``ledger`` the backup at ``source`` (see the module's rules);
    the restored ledger's summary, and that of the copy of what it replaced (None when
    there was no ledger)."""
    wanted = summarize(source)
    with ledger_lock(ledger, exclusive=True):
        kept: LedgerSummary | None = None
        if ledger.is_file():
            current = summarize(ledger)
            if not force and current.last_write_at > wanted.last_write_at:
                raise BackupError(
                    f"the ledger {ledger} is newer than the backup (last write"
                    f" {_utc(current.last_write_at)} against {_utc(wanted.last_write_at)};"
                    f" {current.processed} events against {wanted.processed}): restoring"
                    " would forget what was written since; give --force to restore anyway"
                )
            kept = backup(ledger, keep_dir / f"ledger-replaced-{_stamp()}.sqlite3")
        _copy(source, ledger, journal="WAL")
        restored = summarize(ledger)
    if restored.processed != wanted.processed or restored.intents != wanted.intents:
        raise BackupError(f"the restored ledger {ledger} differs from {source}")
    return restored, kept


def _copy(source: Path, target: Path, journal: str = "DELETE") -> None:
    """SQLite's online backup of ``source`` into ``target``, in one step (one read
    transaction on the source, one write transaction on the target), left in
    ``journal`` mode: DELETE for a backup (one self-contained file), WAL for a ledger."""
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target, timeout=30, isolation_level=None)
        try:
            src.backup(dst, pages=-1)
            dst.execute(f"PRAGMA journal_mode={journal}")
            if journal == "WAL":
                dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise BackupError(f"copying {source} to {target} failed: {exc}") from exc
    finally:
        src.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{time.time_ns() % 10**9:09d}"


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "never"


def default_target(backups_dir: Path) -> Path:
    return backups_dir / f"ledger-{_stamp()}.sqlite3"
