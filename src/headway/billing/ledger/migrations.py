"""The ledger's schema as an ordered list of migrations, for SQLite and Postgres.

Opening a ledger applies the versions missing from ``schema_migrations`` in order, each in
the transaction that records it, under a lock taken before the versions are read (``BEGIN
IMMEDIATE``; ``pg_advisory_xact_lock``): two processes opening at once apply each one once.
An unknown version raises ``SchemaTooNew``, so older code never writes a newer ledger.
Released migrations are never edited: a change is a new version at the end.

Migration 2 keys usage by the registry's tenant id (never reused). Rows written before it
cannot be attributed (the registry is another database, and a name may have been deleted
and created again), so they get the **legacy marker** ``tenant_id`` 0 (``LEGACY_TENANT_ID``),
keep their name, and are billed and exported under it until the operator gives them to a
tenant in one transaction (``headway billing adopt-legacy``: ``Ledger.adopt_legacy``). Their
intents keep their keys (``{tenant}:{hour}:{meter}:{revision}``); new ones are
``id={tenant_id}:…``, a revision counted per key owner (``memory.new_intents``).

Migration 3 gives export planning a **watermark**: ``planned_before``, an hour below which
every hour was planned, and ``export_late_hours``, those below it that a later ``apply``
added to. A plan reads only the hours from the watermark on and the late ones; an existing
ledger starts at 0, so its first plan scans everything once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from headway.billing.ledger.errors import SchemaTooNew
from headway.storage.schema import MAY_MIGRATE, Migration, SchemaNotMigrated, pending

if TYPE_CHECKING:
    import asyncpg


def _tables(blob: str, real: str, identity: str) -> tuple[str, ...]:
    """Migration 1 in a dialect: the two differ only in a few type names."""
    return (
        f"""CREATE TABLE processed_requests (
            request_id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            key_id TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            alias TEXT NOT NULL,
            version TEXT NOT NULL,
            tier TEXT NOT NULL,
            texts BIGINT NOT NULL,
            tokens BIGINT NOT NULL,
            outcome TEXT NOT NULL,
            billable BOOLEAN NOT NULL,
            queue_s {real} NOT NULL,
            inference_s {real} NOT NULL,
            total_s {real} NOT NULL,
            gateway_id TEXT NOT NULL,
            at {real} NOT NULL,
            hour BIGINT NOT NULL,
            recorded_at {real} NOT NULL
        )""",
        "CREATE INDEX processed_requests_tenant_hour ON processed_requests (tenant, hour)",
        """CREATE TABLE hourly_usage (
            tenant TEXT NOT NULL,
            alias TEXT NOT NULL,
            version TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            tier TEXT NOT NULL,
            hour BIGINT NOT NULL,
            requests BIGINT NOT NULL,
            texts BIGINT NOT NULL,
            tokens BIGINT NOT NULL,
            PRIMARY KEY (tenant, alias, version, endpoint, tier, hour)
        )""",
        "CREATE INDEX hourly_usage_hour ON hourly_usage (hour)",
        f"""CREATE TABLE dead_letters (
            id {identity},
            data {blob} NOT NULL,
            reason TEXT NOT NULL,
            source TEXT NOT NULL,
            recorded_at {real} NOT NULL
        )""",
        f"""CREATE TABLE export_intents (
            key TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            hour BIGINT NOT NULL,
            meter TEXT NOT NULL CHECK (meter IN ('texts', 'tokens')),
            revision INTEGER NOT NULL,
            quantity BIGINT NOT NULL CHECK (quantity > 0),
            created_at {real} NOT NULL,
            sent_at {real},
            UNIQUE (tenant, hour, meter, revision)
        )""",
        "CREATE INDEX export_intents_unsent ON export_intents (hour) WHERE sent_at IS NULL",
    )


_TENANT_IDS_SQLITE = (
    # processed_requests keeps its place: a column with a default is all SQLite adds.
    "ALTER TABLE processed_requests ADD COLUMN tenant_id BIGINT NOT NULL DEFAULT 0",
    "DROP INDEX processed_requests_tenant_hour",
    "CREATE INDEX processed_requests_tenant_hour ON processed_requests (tenant_id, hour)",
    # A new primary key, and no unique revision: SQLite rebuilds the two tables.
    """CREATE TABLE hourly_usage_v2 (
        tenant_id BIGINT NOT NULL,
        tenant TEXT NOT NULL,
        alias TEXT NOT NULL,
        version TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        tier TEXT NOT NULL,
        hour BIGINT NOT NULL,
        requests BIGINT NOT NULL,
        texts BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, tenant, alias, version, endpoint, tier, hour)
    )""",
    "INSERT INTO hourly_usage_v2 SELECT 0, tenant, alias, version, endpoint, tier, hour,"
    " requests, texts, tokens FROM hourly_usage",
    "DROP TABLE hourly_usage",
    "ALTER TABLE hourly_usage_v2 RENAME TO hourly_usage",
    "CREATE INDEX hourly_usage_hour ON hourly_usage (hour)",
    """CREATE TABLE export_intents_v2 (
        key TEXT PRIMARY KEY,
        tenant_id BIGINT NOT NULL,
        tenant TEXT NOT NULL,
        hour BIGINT NOT NULL,
        meter TEXT NOT NULL CHECK (meter IN ('texts', 'tokens')),
        revision INTEGER NOT NULL,
        quantity BIGINT NOT NULL CHECK (quantity > 0),
        created_at REAL NOT NULL,
        sent_at REAL
    )""",
    "INSERT INTO export_intents_v2 SELECT key, 0, tenant, hour, meter, revision, quantity,"
    " created_at, sent_at FROM export_intents",
    "DROP TABLE export_intents",
    "ALTER TABLE export_intents_v2 RENAME TO export_intents",
    "CREATE INDEX export_intents_unsent ON export_intents (hour) WHERE sent_at IS NULL",
    "CREATE INDEX export_intents_owner ON export_intents (tenant_id, tenant, hour, meter)",
)
_TENANT_IDS_POSTGRES = (
    *(
        statement
        for table in ("processed_requests", "hourly_usage", "export_intents")
        for statement in (
            f"ALTER TABLE {table} ADD COLUMN tenant_id BIGINT NOT NULL DEFAULT 0",
            f"ALTER TABLE {table} ALTER COLUMN tenant_id DROP DEFAULT",
        )
    ),
    "DROP INDEX processed_requests_tenant_hour",
    "CREATE INDEX processed_requests_tenant_hour ON processed_requests (tenant_id, hour)",
    "ALTER TABLE hourly_usage DROP CONSTRAINT hourly_usage_pkey",
    "ALTER TABLE hourly_usage ADD PRIMARY KEY"
    " (tenant_id, tenant, alias, version, endpoint, tier, hour)",
    "ALTER TABLE export_intents DROP CONSTRAINT export_intents_tenant_hour_meter_revision_key",
    "CREATE INDEX export_intents_owner ON export_intents (tenant_id, tenant, hour, meter)",
)

_WATERMARK = (
    "CREATE TABLE export_watermark ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), planned_before BIGINT NOT NULL)",
    "INSERT INTO export_watermark (id, planned_before) VALUES (1, 0)",
    "CREATE TABLE export_late_hours (hour BIGINT PRIMARY KEY)",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "processed requests, hourly usage, dead letters, export intents",
        sqlite=_tables("BLOB", "REAL", "INTEGER PRIMARY KEY AUTOINCREMENT"),
        postgres=_tables(
            "BYTEA", "DOUBLE PRECISION", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
        ),
    ),
    Migration(
        2,
        "usage keyed by tenant id; rows written before get the legacy id 0 and keep their name",
        sqlite=_TENANT_IDS_SQLITE,
        postgres=_TENANT_IDS_POSTGRES,
    ),
    Migration(
        3,
        "export planning keeps a watermark and the late hours below it",
        sqlite=_WATERMARK,
        postgres=_WATERMARK,
    ),
)

_CREATE_RECORD = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"
)
POSTGRES_LOCK_KEY = 0x6865_6164_7761_79  # "headway": whoever migrates a database holds it


def missing(applied: set[int], migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """The migrations ``applied`` lacks, in order; ``SchemaTooNew`` if it has unknown ones."""
    return pending(applied, migrations, too_new=SchemaTooNew, what="ledger")


def migrate_sqlite(
    db: sqlite3.Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Apply what is missing on ``db`` (opened with ``isolation_level=None``) in one
    ``BEGIN IMMEDIATE`` transaction; the versions applied."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_CREATE_RECORD.format(real="REAL"))
        applied = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
        todo = missing(applied, migrations)
        for migration in todo:
            for statement in migration.sqlite:
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, clock()),
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # SQLite ends some failed transactions itself
            db.execute("ROLLBACK")
        raise
    return [migration.version for migration in todo]


async def migrate_postgres(
    conn: asyncpg.Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Apply what is missing on ``conn`` in one transaction holding the advisory lock
    (released at its end); the versions applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", POSTGRES_LOCK_KEY)
        # A component's role may not create tables: no DDL on an up-to-date ledger.
        exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
        if not exists:
            await _refuse_unless_allowed(conn, list(migrations))
            await conn.execute(_CREATE_RECORD.format(real="DOUBLE PRECISION"))
        applied = {row[0] for row in await conn.fetch("SELECT version FROM schema_migrations")}
        todo = missing(applied, migrations)
        await _refuse_unless_allowed(conn, todo)
        for migration in todo:
            for statement in migration.postgres:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                migration.version,
                clock(),
            )
    return [migration.version for migration in todo]


async def _refuse_unless_allowed(conn: asyncpg.Connection, todo: list[Migration]) -> None:
    """``SchemaNotMigrated`` if ``todo`` is not empty and this role may not apply it."""
    if todo and not await conn.fetchval(MAY_MIGRATE):
        raise SchemaNotMigrated("ledger", [migration.version for migration in todo])
