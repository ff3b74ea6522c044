"""The registry's schema as an ordered list of migrations, for SQLite and Postgres.

A database records the versions it has in ``registry_migrations(version, applied_at)``
(not the ledger's ``schema_migrations``: in shared mode both live in one Postgres
database). Opening a registry applies the missing ones in order, in one write
transaction holding the registry's write lock from before the versions are read, so
two processes opening one database at once apply each migration once. A database
holding a version this code does not know raises ``SchemaTooNew`` rather than being
written by older code.

Migration 1 is the schema the registry had before it was versioned, with ``CREATE
TABLE IF NOT EXISTS``: a file written then upgrades in place. Migrations are never
edited once released: a change is a new version at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headway.registry.errors import SchemaTooNew
from headway.storage.dialect import DialectName, Tx
from headway.storage.schema import Migration, apply, ensure_record, pending, refuse_unless_allowed


@dataclass(frozen=True, slots=True)
class _Types:
    """What the two dialects spell differently."""

    blob: str
    real: str
    big: str
    json: str
    identity: str


SQLITE = _Types("BLOB", "REAL", "INTEGER", "TEXT", "INTEGER PRIMARY KEY AUTOINCREMENT")
POSTGRES = _Types(
    "BYTEA",
    "DOUBLE PRECISION",
    "BIGINT",
    "JSONB",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
)


def _unversioned(t: _Types, tenant_id: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE IF NOT EXISTS tenants (
            id {tenant_id},
            name TEXT NOT NULL UNIQUE,
            tier TEXT NOT NULL CHECK (tier IN ('interactive', 'batch')),
            rate_texts_per_s {t.real} NOT NULL CHECK (rate_texts_per_s > 0),
            burst_texts {t.real} NOT NULL CHECK (burst_texts > 0),
            created_at {t.real} NOT NULL
        )""",
        f"""CREATE TABLE IF NOT EXISTS api_keys (
            key_digest {t.blob} PRIMARY KEY,
            tenant_id {t.big} REFERENCES tenants (id),
            role TEXT NOT NULL CHECK (role IN ('tenant', 'admin')),
            created_at {t.real} NOT NULL,
            revoked_at {t.real},
            CHECK ((role = 'admin') = (tenant_id IS NULL))
        )""",
        f"""CREATE TABLE IF NOT EXISTS models (
            version TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('embedding', 'cross-encoder')),
            dimensions INTEGER NOT NULL,
            quantization TEXT NOT NULL,
            created_at {t.real} NOT NULL
        )""",
        f"""CREATE TABLE IF NOT EXISTS aliases (
            alias TEXT PRIMARY KEY,
            version TEXT NOT NULL REFERENCES models (version),
            updated_at {t.real} NOT NULL
        )""",
    )


def _key_ids(t: _Types, first_8_bytes_hex: str) -> tuple[str, ...]:
    return (
        "ALTER TABLE api_keys ADD COLUMN key_id TEXT",
        f"ALTER TABLE api_keys ADD COLUMN expires_at {t.real}",
        f"UPDATE api_keys SET key_id = {first_8_bytes_hex}",
        "CREATE UNIQUE INDEX api_keys_key_id ON api_keys (key_id)",
    )


def _splits_and_rollouts(t: _Types) -> tuple[str, ...]:
    active = "('running', 'paused', 'halted', 'awaiting_approval')"
    return (
        f"""CREATE TABLE splits (
            alias TEXT PRIMARY KEY REFERENCES aliases (alias),
            weights {t.json} NOT NULL,
            sticky TEXT NOT NULL CHECK (sticky IN ('tenant', 'user', 'none')),
            pins {t.json} NOT NULL,
            shadow_version TEXT,
            shadow_share {t.real},
            updated_at {t.real} NOT NULL,
            CHECK ((shadow_version IS NULL) = (shadow_share IS NULL))
        )""",
        f"""CREATE TABLE rollouts (
            id {t.identity},
            alias TEXT NOT NULL REFERENCES aliases (alias),
            primary_version TEXT NOT NULL,
            candidate_version TEXT NOT NULL,
            plan {t.json} NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'halted',
                'awaiting_approval', 'succeeded', 'rolled_back', 'aborted')),
            step INTEGER NOT NULL,
            step_started_at {t.real},
            reason TEXT NOT NULL,
            started_by TEXT NOT NULL,
            created_at {t.real} NOT NULL,
            updated_at {t.real} NOT NULL
        )""",
        # The code refuses a second active rollout inside the write lock; this is the
        # backstop the error tree's docstring promises.
        f"CREATE UNIQUE INDEX rollouts_one_active ON rollouts (alias) WHERE state IN {active}",
        f"""CREATE TABLE observations (
            rollout_id {t.big} NOT NULL REFERENCES rollouts (id),
            step INTEGER NOT NULL,
            gateway_id TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('primary', 'candidate', 'shadow')),
            requests {t.big} NOT NULL,
            errors {t.big} NOT NULL,
            latency_buckets {t.json} NOT NULL,
            agreement_n {t.big} NOT NULL,
            agreement_sum {t.real} NOT NULL,
            top1_n {t.big} NOT NULL,
            top1_agree {t.big} NOT NULL,
            updated_at {t.real} NOT NULL,
            PRIMARY KEY (rollout_id, step, gateway_id, role)
        )""",
    )


def _audit_and_changes(t: _Types, append_only: tuple[str, ...]) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE audit_log (
            id {t.identity},
            at {t.real} NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT NOT NULL,
            before {t.json},
            after {t.json},
            request_id TEXT NOT NULL
        )""",
        "CREATE INDEX audit_log_target ON audit_log (target, id)",
        "CREATE INDEX audit_log_at ON audit_log (at)",
        *append_only,
        f"""CREATE TABLE registry_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            changes {t.big} NOT NULL
        )""",
        "INSERT INTO registry_state (id, changes) VALUES (1, 0)",
    )


def _model_shapes() -> tuple[str, ...]:
    """Versions registered before keep 0 (not recorded) and no narrower widths. The widths
    are a JSON array in a TEXT column on both dialects (read by one ``codec.model_of``)."""
    return (
        "ALTER TABLE models ADD COLUMN max_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE models ADD COLUMN matryoshka_dimensions TEXT NOT NULL DEFAULT '[]'",
    )


def _batch_limits(t: _Types) -> tuple[str, ...]:
    """Tenants made before keep NULL in each: the gateway's setting applies to them."""
    return tuple(
        f"ALTER TABLE tenants ADD COLUMN {column} {t.big} CHECK ({column} >= 0)"
        for column in ("max_files", "max_stored_bytes", "max_open_batches")
    )


def _tenant_ids_and_deletions(t: _Types, highest_ever: str) -> tuple[str, ...]:
    """The highest tenant id ever given, so that none is given again (SQLite's ``INTEGER
    PRIMARY KEY`` without ``AUTOINCREMENT`` gives the largest id plus one, the id of a
    deleted newest tenant again; a Postgres identity does not, and is read too), and a
    record of each deletion whose data outside the registry is still to delete. On SQLite
    the ids of tenants deleted before this migration are not known (the audit log did not
    record ids), so only the tenants there now count; nothing was keyed by such an id yet
    (usage carries ids only from code that opened, so migrated, the registry)."""
    return (
        f"ALTER TABLE registry_state ADD COLUMN last_tenant_id {t.big} NOT NULL DEFAULT 0",
        f"UPDATE registry_state SET last_tenant_id = {highest_ever}",
        f"""CREATE TABLE tenant_deletions (
            tenant_id {t.big} PRIMARY KEY,
            name TEXT NOT NULL,
            deleted_at {t.real} NOT NULL,
            blobs {t.json},
            finished_at {t.real}
        )""",
        "CREATE INDEX tenant_deletions_pending ON tenant_deletions (name)"
        " WHERE finished_at IS NULL",
    )


_MAX_TENANT_ID = "(SELECT COALESCE(MAX(id), 0) FROM tenants)"
_POSTGRES_HIGHEST_TENANT_ID = (
    f"GREATEST({_MAX_TENANT_ID},"
    " COALESCE(pg_sequence_last_value(pg_get_serial_sequence('tenants', 'id')), 0))"
)

# No code path updates or deletes an audit entry; these make the database refuse it too.
_SQLITE_APPEND_ONLY = tuple(
    f"""CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log
        BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END"""
    for verb in ("UPDATE", "DELETE")
)
_POSTGRES_APPEND_ONLY = (
    """CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'audit_log is append-only'; END $$""",
    """CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
        FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()""",
)


def _billing_customers(t: _Types) -> tuple[str, ...]:
    """Keyed by tenant id with no foreign key on purpose: a deleted tenant's last hours
    are still exported, to its customer, after its row is gone."""
    return (
        f"""CREATE TABLE billing_customers (
            tenant_id {t.big} PRIMARY KEY,
            customer_id TEXT NOT NULL,
            updated_at {t.real} NOT NULL
        )""",
    )


def _model_prompts() -> tuple[str, ...]:
    """Versions registered before have none. The prompts are a JSON object in a TEXT column
    on both dialects (read by one ``codec.model_of``)."""
    return (
        "ALTER TABLE models ADD COLUMN prompts TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE models ADD COLUMN default_prompt TEXT",
    )


def _variant_agreement() -> tuple[str, ...]:
    """JSON objects in TEXT columns on both dialects; NULL: not derived, no gate."""
    return (
        "ALTER TABLE models ADD COLUMN agreement TEXT",
        "ALTER TABLE models ADD COLUMN variant_gate TEXT",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "tenants, API key digests, model versions, aliases (the unversioned schema)",
        sqlite=_unversioned(SQLITE, "INTEGER PRIMARY KEY"),
        postgres=_unversioned(POSTGRES, "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    ),
    Migration(
        2,
        "key ids (the digest's first 8 bytes in hex) and key expiry, for rotation",
        sqlite=_key_ids(SQLITE, "lower(hex(substr(key_digest, 1, 8)))"),
        postgres=_key_ids(POSTGRES, "encode(substring(key_digest FROM 1 FOR 8), 'hex')"),
    ),
    Migration(
        3,
        "model artifact sizes",
        sqlite=("ALTER TABLE models ADD COLUMN size_bytes INTEGER NOT NULL DEFAULT 0",),
        postgres=("ALTER TABLE models ADD COLUMN size_bytes BIGINT NOT NULL DEFAULT 0",),
    ),
    Migration(
        4,
        "traffic splits, rollouts, per-gateway rollout observations",
        sqlite=_splits_and_rollouts(SQLITE),
        postgres=_splits_and_rollouts(POSTGRES),
    ),
    Migration(
        5,
        "the append-only audit log and the change counter",
        sqlite=_audit_and_changes(SQLITE, _SQLITE_APPEND_ONLY),
        postgres=_audit_and_changes(POSTGRES, _POSTGRES_APPEND_ONLY),
    ),
    Migration(
        6,
        "each model's token limit and the narrower widths it was trained for (Matryoshka)",
        sqlite=_model_shapes(),
        postgres=_model_shapes(),
    ),
    Migration(
        7,
        "a tenant's own Batch API bounds (files, stored bytes, open batches; NULL: the setting)",
        sqlite=_batch_limits(SQLITE),
        postgres=_batch_limits(POSTGRES),
    ),
    Migration(
        8,
        "tenant ids never given twice; a record of each tenant deletion to finish",
        sqlite=_tenant_ids_and_deletions(SQLITE, _MAX_TENANT_ID),
        postgres=_tenant_ids_and_deletions(POSTGRES, _POSTGRES_HIGHEST_TENANT_ID),
    ),
    Migration(
        9,
        "each tenant id's customer at the billing provider (the usage export's mapping)",
        sqlite=_billing_customers(SQLITE),
        postgres=_billing_customers(POSTGRES),
    ),
    Migration(
        10,
        "each model's prompts (a text put before an input, by name) and its default prompt",
        sqlite=_model_prompts(),
        postgres=_model_prompts(),
    ),
    Migration(
        11,
        "a derived version's agreement with its source; the gate a variant of a model must pass",
        sqlite=_variant_agreement(),
        postgres=_variant_agreement(),
    ),
)


_CREATE_RECORD = (
    "CREATE TABLE IF NOT EXISTS registry_migrations"
    " (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"
)


def missing(applied: set[int], migrations: tuple[Migration, ...] = MIGRATIONS) -> list[Migration]:
    """The migrations ``applied`` lacks, in order; ``SchemaTooNew`` if it has unknown ones."""
    return pending(applied, migrations, too_new=SchemaTooNew, what="registry")


def migrate(
    tx: Tx,
    dialect: DialectName,
    clock: Callable[[], float],
    migrations: tuple[Migration, ...] = MIGRATIONS,
) -> list[int]:
    """Apply what is missing in ``tx`` (a write transaction: it holds the lock); the
    versions applied."""
    create = _CREATE_RECORD.format(real=SQLITE.real if dialect == "sqlite" else POSTGRES.real)
    table = "registry_migrations"
    ensure_record(tx, dialect, table, create, what="registry", migrations=migrations)
    applied = {version for (version,) in tx.all("SELECT version FROM registry_migrations")}
    todo = missing(applied, migrations)
    refuse_unless_allowed(tx, dialect, "registry", todo)
    return apply(tx, dialect, table, todo, clock())
