"""The registry's schema migrations: applied once, upgrading old files, refusing newer
databases."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from headway.registry.errors import SchemaTooNew
from headway.registry.keys import key_digest
from headway.registry.migrations import MIGRATIONS, migrate
from headway.registry.model import BatchLimits, key_id_of
from headway.registry.sql import SqlRegistry
from headway.registry.sqlite import Registry
from headway.storage.dialect import Dialect
from headway.storage.postgres import PostgresDialect
from headway.storage.sqlite import SqliteDialect
from tests.registry.conftest import Backend

# The registry's schema before it was versioned, as files written then hold it.
UNVERSIONED_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    tier TEXT NOT NULL CHECK (tier IN ('interactive', 'batch')),
    rate_texts_per_s REAL NOT NULL CHECK (rate_texts_per_s > 0),
    burst_texts REAL NOT NULL CHECK (burst_texts > 0),
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_digest BLOB PRIMARY KEY,
    tenant_id INTEGER REFERENCES tenants (id),
    role TEXT NOT NULL CHECK (role IN ('tenant', 'admin')),
    created_at REAL NOT NULL,
    revoked_at REAL,
    CHECK ((role = 'admin') = (tenant_id IS NULL))
);
CREATE TABLE IF NOT EXISTS models (
    version TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('embedding', 'cross-encoder')),
    dimensions INTEGER NOT NULL,
    quantization TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS aliases (
    alias TEXT PRIMARY KEY,
    version TEXT NOT NULL REFERENCES models (version),
    updated_at REAL NOT NULL
);
"""
ALL_VERSIONS = [migration.version for migration in MIGRATIONS]


def applied(backend: Backend) -> list[int]:
    return [v for (v,) in backend.sql("SELECT version FROM registry_migrations ORDER BY version")]


def test_registries_opening_an_empty_database_at_once_migrate_it_once(backend: Backend) -> None:
    openers = 4
    start = threading.Barrier(openers)
    opened: list[SqlRegistry] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(backend.open_another())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(opened) == openers
    assert applied(backend) == ALL_VERSIONS
    assert backend.sql("SELECT changes FROM registry_state") == [(0,)]
    opened[0].add_tenant("acme", "batch")
    assert [t.name for t in opened[-1].tenants()] == ["acme"]


def test_a_database_migrated_by_newer_code_is_refused(backend: Backend) -> None:
    backend.open_another().add_tenant("acme", "batch")
    backend.sql("INSERT INTO registry_migrations (version, applied_at) VALUES (99, 0)")
    with pytest.raises(SchemaTooNew, match=r"\[99\]"):
        backend.open_another()
    assert applied(backend) == [*ALL_VERSIONS, 99]


def test_an_unversioned_sqlite_file_upgrades_in_place_and_keeps_its_tenants(
    tmp_path: Path,
) -> None:
    path = tmp_path / "registry.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(UNVERSIONED_SCHEMA)
    db.execute(
        "INSERT INTO tenants (name, tier, rate_texts_per_s, burst_texts, created_at)"
        " VALUES ('acme', 'batch', 5, 10, 1)"
    )
    db.executemany(
        "INSERT INTO api_keys (key_digest, tenant_id, role, created_at) VALUES (?, ?, ?, ?)",
        [(key_digest("old-key"), 1, "tenant", 1), (key_digest("old-admin"), None, "admin", 2)],
    )
    db.execute(
        "INSERT INTO models (version, name, kind, dimensions, quantization, created_at)"
        " VALUES ('v1', 'mini', 'embedding', 384, 'none', 3)"
    )
    db.execute("INSERT INTO aliases (alias, version, updated_at) VALUES ('mini', 'v1', 3)")
    db.commit()
    db.close()

    registry = Registry(path)
    assert [(t.name, t.rate_texts_per_s) for t in registry.tenants()] == [("acme", 5.0)]
    assert registry.tenant("acme").batch_limits == BatchLimits()  # the settings apply
    principal = registry.snapshot().principals[key_digest("old-key")]
    assert principal.tenant is not None and principal.tenant.name == "acme"
    assert [k.key_id for k in registry.keys("acme")] == [key_id_of(key_digest("old-key"))]
    registry.revoke_key(key_id_of(key_digest("old-key")))  # found by its backfilled id
    assert key_digest("old-key") not in registry.snapshot().principals
    record = registry.resolve_model("mini")
    assert record is not None and (record.version, record.size_bytes) == ("v1", 0)
    check = sqlite3.connect(path)
    try:
        versions = [v for (v,) in check.execute("SELECT version FROM registry_migrations")]
    finally:
        check.close()
    assert versions == ALL_VERSIONS
    Registry(path)  # and opening it again applies nothing


def test_after_the_upgrade_no_tenant_id_is_given_twice(backend: Backend) -> None:
    """A registry of migration 6 whose newest tenant was deleted: Postgres's identity had
    given that id, and the upgrade keeps it given; SQLite knows only the ids there now."""
    dialect: Dialect = (
        SqliteDialect(Path(backend.location), 10.0)
        if backend.kind == "sqlite"
        else PostgresDialect(backend.location, 10.0)
    )
    try:
        with dialect.write() as tx:
            migrate(tx, dialect.name, lambda: 0.0, MIGRATIONS[:6])
            for name in ("acme", "globex"):
                tx.execute(
                    "INSERT INTO tenants (name, tier, rate_texts_per_s, burst_texts, created_at)"
                    " VALUES (?, 'batch', 1, 1, 0)",
                    (name,),
                )
            tx.execute("DELETE FROM tenants WHERE name = 'globex'")
    finally:
        dialect.close()
    registry = backend.open_another()
    assert applied(backend) == ALL_VERSIONS
    (kept,) = registry.tenants()
    created, _ = registry.add_tenant("initech", "batch")
    assert kept.id == 1
    assert created.id == (2 if backend.kind == "sqlite" else 3)
    registry.delete_tenant("initech")
    registry.finish_deletion(created.id)
    assert registry.add_tenant("initech", "batch")[0].id == created.id + 1
