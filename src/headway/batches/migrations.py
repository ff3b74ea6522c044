"""The batch store's schema as an ordered list of migrations, for SQLite and Postgres.

A database records the versions it has in ``batch_migrations(version, applied_at)``,
a table of its own: in shared mode the registry, the ledger and the batch store live
in one Postgres database, each with its own migrations. Opening a store applies the
missing ones in order in one write transaction, serialized between processes (SQLite:
``BEGIN IMMEDIATE``; Postgres: an advisory lock of the batch store's own, so opening a
store never waits for registry writes), so two processes opening one database at once
apply each migration once. A database holding a version this code does not know
raises ``BatchSchemaTooNew``. Migrations are never edited once released: a change is
a new version at the end.

Version 3 keys files and batches by their tenant's id (``tenant_id``; ``tenant`` stays,
the name, for display, logs and the adoption below). The registry is another database
(or another store in the same one), so the migration cannot fill the column: rows already
there get ``LEGACY_TENANT_ID`` (0, never a tenant's id), and so does any row a process of
the previous version writes while an upgrade rolls (the column's default). Such a row is
nobody's: no read by tenant finds it, the mover leaves its batch alone and the executor
holds its lines back. It is *adopted* by name, by ``control/batches/legacy.py``, which
every gateway runs at start and in its ``tenant_deletions`` loop, and before a deletion
is finished: a name's legacy rows go to the oldest unfinished deletion of that name if
there is one (until this version a name was not given again before its deletion had
finished, so such rows were its tenant's), else to the current tenant of the name; a
name with neither keeps them nobody's. The indexes by name go (every read is by id now);
the adoption finds legacy rows on the new indexes, by their id 0.

Tables are prefixed ``batch``: the embedded work queue shares the SQLite file.
No foreign key joins results to batches: ``record`` checks its batch in the same
transaction (its counts update), and ``delete_tenant`` deletes a batch before its
results, which together keep a result from outliving its batch under concurrency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

from headway.batches.model import TIMESTAMP_OF, BatchStatus
from headway.batches.store import BatchSchemaTooNew
from headway.storage.dialect import DialectName, Tx
from headway.storage.schema import Migration, apply, ensure_record, pending, refuse_unless_allowed

MIGRATE_LOCK_KEY = 0x6865_6164_7761_7942  # "headwayB": held while batch migrations run

_STATUSES = ", ".join(f"'{status}'" for status in get_args(BatchStatus))


@dataclass(frozen=True, slots=True)
class _Types:
    """What the two dialects spell differently."""

    blob: str
    big: str
    json: str


SQLITE = _Types("BLOB", "INTEGER", "TEXT")
POSTGRES = _Types("BYTEA", "BIGINT", "JSONB")


def _files_batches_results(t: _Types) -> tuple[str, ...]:
    stamps = ",\n            ".join(f"{column} {t.big}" for column in TIMESTAMP_OF.values())
    return (
        f"""CREATE TABLE batch_files (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            purpose TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output')),
            filename TEXT NOT NULL,
            bytes {t.big} NOT NULL CHECK (bytes >= 0),
            sha256 TEXT NOT NULL,
            created_at {t.big} NOT NULL,
            expires_at {t.big},
            lines {t.big} NOT NULL CHECK (lines >= 0)
        )""",
        "CREATE INDEX batch_files_tenant ON batch_files (tenant, created_at, id)",
        "CREATE INDEX batch_files_expiry ON batch_files (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX batch_files_sha256 ON batch_files (sha256)",
        f"""CREATE TABLE batches (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            key_id TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            input_file_id TEXT NOT NULL,
            completion_window TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ({_STATUSES})),
            created_at {t.big} NOT NULL,
            expires_at {t.big} NOT NULL,
            metadata {t.json} NOT NULL,
            errors {t.json} NOT NULL,
            total {t.big} NOT NULL,
            completed {t.big} NOT NULL,
            failed {t.big} NOT NULL,
            output_file_id TEXT,
            error_file_id TEXT,
            {stamps}
        )""",
        "CREATE INDEX batches_tenant ON batches (tenant, created_at, id)",
        "CREATE INDEX batches_status ON batches (status, created_at, id)",
        f"""CREATE TABLE batch_results (
            batch_id TEXT NOT NULL,
            line {t.big} NOT NULL,
            ok BOOLEAN NOT NULL,
            data {t.blob} NOT NULL,
            PRIMARY KEY (batch_id, line)
        )""",
    )


def _tenant_ids(t: _Types) -> tuple[str, ...]:
    return (
        f"ALTER TABLE batch_files ADD COLUMN tenant_id {t.big} NOT NULL DEFAULT 0",
        f"ALTER TABLE batches ADD COLUMN tenant_id {t.big} NOT NULL DEFAULT 0",
        "CREATE INDEX batch_files_tenant_id ON batch_files (tenant_id, created_at, id)",
        "CREATE INDEX batches_tenant_id ON batches (tenant_id, created_at, id)",
        "DROP INDEX batch_files_tenant",
        "DROP INDEX batches_tenant",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "file records, batches, line results",
        sqlite=_files_batches_results(SQLITE),
        postgres=_files_batches_results(POSTGRES),
    ),
    Migration(
        2,
        "the trace each batch was created in",
        sqlite=("ALTER TABLE batches ADD COLUMN traceparent TEXT NOT NULL DEFAULT ''",),
        postgres=("ALTER TABLE batches ADD COLUMN traceparent TEXT NOT NULL DEFAULT ''",),
    ),
    Migration(
        3,
        "files and batches keyed by the tenant's id (legacy rows 0 until adopted by name)",
        sqlite=_tenant_ids(SQLITE),
        postgres=_tenant_ids(POSTGRES),
    ),
)

_CREATE_RECORD = (
    "CREATE TABLE IF NOT EXISTS batch_migrations"
    " (version INTEGER PRIMARY KEY, applied_at {big} NOT NULL)"
)


def missing(applied: set[int], migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """The migrations ``applied`` lacks, in order; ``BatchSchemaTooNew`` if it has unknown
    ones."""
    return pending(applied, migrations, too_new=BatchSchemaTooNew, what="batch store")


def migrate(
    tx: Tx,
    dialect: DialectName,
    clock: Callable[[], float],
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> list[int]:
    """Apply what is missing in ``tx`` (a write transaction); the versions applied."""
    if dialect == "postgres":
        tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK_KEY,))
    types = SQLITE if dialect == "sqlite" else POSTGRES
    create = _CREATE_RECORD.format(big=types.big)
    what = "batch store"
    ensure_record(tx, dialect, "batch_migrations", create, what=what, migrations=migrations)
    applied = {version for (version,) in tx.all("SELECT version FROM batch_migrations")}
    todo = missing(applied, migrations)
    refuse_unless_allowed(tx, dialect, what, todo)
    return apply(tx, dialect, "batch_migrations", todo, int(clock()))
