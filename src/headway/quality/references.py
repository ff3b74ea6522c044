"""Stored reference samples: taken once per (version, kind), by whichever gateway fills
one first, and kept, so that a restart or a second gateway compares with the version's
outputs when it went live, never with a reference retaken from drifted traffic.

``save_if_absent`` is first writer wins: ``INSERT … ON CONFLICT (version, kind) DO
NOTHING``, then the stored row is read back in the same transaction and returned, whoever
wrote it; a caller adopts what it gets. On SQLite the write holds the file's write lock
(``BEGIN IMMEDIATE``) throughout; on Postgres (READ COMMITTED) a second insert waits for the
first's row, finds the conflict, and its read, a new statement, sees the first's committed row.

``SqlReferenceStore`` runs on the storage layer's ``Dialect``: ``quality.sqlite3`` in the
data dir or, in shared mode, the Postgres database of ``postgres_url``, with migrations
recorded in ``quality_migrations``. The sample is a BLOB/BYTEA of float32 little-endian,
``rows × dims`` row-major. Calls are synchronous and do I/O: callers on an event loop run
them in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from headway.settings import Settings
from headway.storage.dialect import Dialect, DialectName, Row, Tx
from headway.storage.errors import StorageError, StorageUnavailable
from headway.storage.postgres import PostgresDialect
from headway.storage.schema import Migration, apply, ensure_record, pending, refuse_unless_allowed
from headway.storage.sqlite import SqliteDialect

QualityKind = Literal["embedding", "rerank"]
"""What a sample holds: embedding rows (n × dims), or rerank scores (n × 1)."""

MIGRATE_LOCK_KEY = 0x6865_6164_7761_7951  # "headwayQ": held while quality migrations run
_COLUMNS = "version, kind, taken_at, rows, dims, sample"


class QualityStoreError(Exception):
    """The reference store's database refused the call, or holds a corrupt row."""


class QualityStoreUnavailable(QualityStoreError):
    """The reference store's database cannot be reached or locked now; retry later."""


class QualitySchemaTooNew(QualityStoreError):
    """The reference store's database has schema versions this code does not know."""


@dataclass(frozen=True, slots=True, eq=False)
class Reference:
    version: str
    kind: QualityKind
    taken_at: float
    """Wall-clock time (Unix seconds) the sample was complete."""
    sample: npt.NDArray[np.float32]
    """rows × dims."""

    @property
    def rows(self) -> int:
        return int(self.sample.shape[0])

    @property
    def dims(self) -> int:
        return int(self.sample.shape[1])


class ReferenceStore(Protocol):
    def load(self, version: str, kind: QualityKind) -> Reference | None: ...

    def save_if_absent(self, reference: Reference) -> Reference:
        """Store ``reference`` unless one is stored for its (version, kind); what is
        stored now (first writer wins)."""
        ...

    def close(self) -> None: ...


class MemoryReferenceStore:
    """In-process; survives a monitor's "restart" when the test hands it to the next."""

    def __init__(self) -> None:
        self.references: dict[tuple[str, QualityKind], Reference] = {}
        self.saves = 0
        """Calls of ``save_if_absent``, whether they stored anything or not."""

    def load(self, version: str, kind: QualityKind) -> Reference | None:
        return self.references.get((version, kind))

    def save_if_absent(self, reference: Reference) -> Reference:
        self.saves += 1
        return self.references.setdefault((reference.version, reference.kind), reference)

    def close(self) -> None:
        pass


def _references_table(real: str, blob: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE quality_references (
            version TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('embedding', 'rerank')),
            taken_at {real} NOT NULL,
            rows INTEGER NOT NULL CHECK (rows > 0),
            dims INTEGER NOT NULL CHECK (dims > 0),
            sample {blob} NOT NULL,
            PRIMARY KEY (version, kind)
        )""",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "reference samples per (version, kind)",
        sqlite=_references_table("REAL", "BLOB"),
        postgres=_references_table("DOUBLE PRECISION", "BYTEA"),
    ),
)


class SqlReferenceStore:
    def __init__(self, dialect: Dialect, *, clock: Callable[[], float] = time.time) -> None:
        """Apply the missing migrations (``QualitySchemaTooNew`` on a newer database)."""
        self._dialect = dialect
        try:
            with _translated(), dialect.write(lock=False) as tx:
                _migrate(tx, dialect.name, clock())
        except BaseException:
            dialect.close()  # nobody else will: the store was never returned
            raise

    def load(self, version: str, kind: QualityKind) -> Reference | None:
        with _translated(), self._dialect.read() as tx:
            row = tx.one(
                f"SELECT {_COLUMNS} FROM quality_references WHERE version = ? AND kind = ?",
                (version, kind),
            )
        return None if row is None else _reference_of(row)

    def save_if_absent(self, reference: Reference) -> Reference:
        sample = np.ascontiguousarray(reference.sample, dtype="<f4")
        with _translated(), self._dialect.write(lock=False) as tx:
            tx.execute(
                f"INSERT INTO quality_references ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (version, kind) DO NOTHING",
                (
                    reference.version,
                    reference.kind,
                    float(reference.taken_at),
                    reference.rows,
                    reference.dims,
                    sample.tobytes(),
                ),
            )
            row = tx.one(
                f"SELECT {_COLUMNS} FROM quality_references WHERE version = ? AND kind = ?",
                (reference.version, reference.kind),
            )
        if row is None:  # inserted or already there, in this transaction: cannot be
            raise QualityStoreError(f"no reference stored for {reference.version} after a save")
        return _reference_of(row)

    def close(self) -> None:
        self._dialect.close()


def open_reference_store(settings: Settings) -> SqlReferenceStore:
    """Postgres in shared mode (``postgres_url``), else ``quality.sqlite3`` in the data dir."""
    if settings.postgres_url:
        return postgres_reference_store(settings.postgres_url)
    return sqlite_reference_store(settings.data_dir / "quality.sqlite3")


def sqlite_reference_store(path: Path, *, timeout_s: float = 10.0) -> SqlReferenceStore:
    """A connection per call: safe to share between threads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _translated():
        dialect = SqliteDialect(path, timeout_s)
    return SqlReferenceStore(dialect)


def postgres_reference_store(url: str, *, connect_timeout_s: float = 10.0) -> SqlReferenceStore:
    """One connection, opened on first use, one call at a time; ``close`` it when done."""
    return SqlReferenceStore(PostgresDialect(url, connect_timeout_s))


def _migrate(tx: Tx, dialect: DialectName, applied_at: float) -> list[int]:
    if dialect == "postgres":
        tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK_KEY,))
    real = "REAL" if dialect == "sqlite" else "DOUBLE PRECISION"
    create = (
        "CREATE TABLE IF NOT EXISTS quality_migrations"
        f" (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"
    )
    what = "quality store"
    ensure_record(tx, dialect, "quality_migrations", create, what=what, migrations=MIGRATIONS)
    applied = {version for (version,) in tx.all("SELECT version FROM quality_migrations")}
    todo = pending(applied, MIGRATIONS, too_new=QualitySchemaTooNew, what=what)
    refuse_unless_allowed(tx, dialect, what, todo)
    return apply(tx, dialect, "quality_migrations", todo, applied_at)


def _reference_of(row: Row) -> Reference:
    version, kind, taken_at, rows, dims, blob = row
    data = bytes(blob)
    if len(data) != rows * dims * 4:
        raise QualityStoreError(
            f"the stored reference of {version} ({kind}) holds {len(data)} bytes,"
            f" not {rows} × {dims} float32"
        )
    sample = np.frombuffer(data, dtype="<f4").reshape(rows, dims).astype(np.float32)
    return Reference(version, kind, float(taken_at), sample)


@contextmanager
def _translated() -> Iterator[None]:
    """The dialect's errors as the reference store's."""
    try:
        yield
    except StorageUnavailable as exc:
        raise QualityStoreUnavailable(
            f"the quality reference store cannot be used now (retry later): {exc}"
        ) from exc
    except StorageError as exc:
        raise QualityStoreError(f"the quality reference store refused the call: {exc}") from exc
