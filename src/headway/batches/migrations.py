"""The batch store's schema as an ordered list of migrations, for SQLite and Postgres.

A database records its versions in ``batch_migrations`` (its own table: in shared mode
the registry, the ledger and the batch store share one Postgres database). Opening a store
applies the missing ones in order in one write transaction, serialized between processes
(SQLite: ``BEGIN IMMEDIATE``; Postgres: the batch store's own advisory lock, so it never
waits for registry writes); an unknown version raises ``BatchSchemaTooNew``. A released
migration is never edited: a change is a new version at the end.

Version 3 keys files and batches by tenant id (``tenant`` stays, the name). The registry
is elsewhere, so rows already there, and rows the previous version writes during a rolling
upgrade (the column's default), get ``LEGACY_TENANT_ID``: nobody's, unseen by reads by
tenant, left alone by the mover and the executor until ``control/batches/legacy.py``
adopts them by name (to the oldest unfinished deletion of that name, whose tenant they
were, else to its current tenant).

Tables are prefixed ``batch``: the embedded work queue shares the SQLite file. No foreign
key joins results to batches: ``record`` checks its batch in its transaction and
``delete_tenant`` deletes batches before results, so no result outlives its batch.
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
