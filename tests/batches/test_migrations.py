"""The batch store's schema migrations: applied once, beside the registry's, refusing
databases migrated by newer code."""

from __future__ import annotations

import pytest

from headway.batches.migrations import MIGRATIONS, migrate
from headway.batches.sql import SqlBatchStore
from headway.batches.store import BatchSchemaTooNew
from headway.registry.postgres import PostgresRegistry
from headway.registry.sqlite import Registry
from tests.batches.conftest import Backend
from tests.batches.test_contract import ACME, a_file, at_once

ALL_VERSIONS = [migration.version for migration in MIGRATIONS]


def applied(backend: Backend) -> list[tuple[int, int]]:
    return backend.sql("SELECT version, applied_at FROM batch_migrations ORDER BY version")


def test_opening_a_migrated_database_again_changes_nothing(backend: Backend) -> None:
    first = backend.open_another(clock=lambda: 1000.0)
    first.add_file(a_file("file-1"))
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]
    again = backend.open_another(clock=lambda: 2000.0)
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]
    assert again.file(ACME, "file-1") == a_file("file-1")
    dialect = backend.open_dialect()
    with dialect.write(lock=False) as tx:
        assert migrate(tx, dialect.name, lambda: 3000.0) == []
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]


def test_stores_opening_an_empty_database_at_once_migrate_it_once(backend: Backend) -> None:
    opened: list[SqlBatchStore] = at_once([backend.open_another for _ in range(4)])
    assert [version for version, _ in applied(backend)] == ALL_VERSIONS
    opened[0].add_file(a_file("file-1"))
    assert opened[-1].file(ACME, "file-1") == a_file("file-1")


def test_a_database_migrated_by_newer_code_is_refused(backend: Backend) -> None:
    backend.open_another()
    backend.sql("INSERT INTO batch_migrations (version, applied_at) VALUES (99, 0)")
    with pytest.raises(BatchSchemaTooNew, match=r"batch store's database .*\[99\]"):
        backend.open_another()


def test_the_store_and_the_registry_share_a_database(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    store = backend.open_another()
    if backend.kind == "sqlite":
        path = request.getfixturevalue("tmp_path") / "batches.sqlite3"
        registry: Registry | PostgresRegistry = Registry(path)
    else:
        registry = PostgresRegistry(request.getfixturevalue("libpq_url"))
        request.addfinalizer(registry.close)
    registry.add_tenant("acme", "batch")
    store.add_file(a_file("file-1"))
    backend.open_another()  # its migrations are found applied, the registry's untouched
    assert [version for version, _ in applied(backend)] == ALL_VERSIONS
    assert backend.sql("SELECT count(*) FROM registry_migrations") != [(0,)]
    assert [t.name for t in registry.tenants()] == ["acme"]
    assert store.file(ACME, "file-1") == a_file("file-1")


def test_a_store_of_version_2_is_upgraded_its_rows_legacy_until_adopted(
    backend: Backend,
) -> None:
    """Files and batches written before tenant ids (migrations 1-2, the columns of then):
    kept, nobody's (id 0) and not found by any tenant until adopted by name."""
    dialect = backend.open_dialect()
    with dialect.write(lock=False) as tx:
        assert migrate(tx, dialect.name, lambda: 1000.0, MIGRATIONS[:2]) == [1, 2]
    old_file = (
        "INSERT INTO batch_files (id, tenant, purpose, filename, bytes, sha256, created_at,"
        " expires_at, lines) VALUES ('{}', 'acme', 'batch', 'in.jsonl', 10, 'd', 100, NULL, 1)"
    )
    backend.sql(old_file.format("file-old"))
    backend.sql(
        "INSERT INTO batches (id, tenant, key_id, endpoint, input_file_id, completion_window,"
        " status, created_at, expires_at, metadata, errors, total, completed, failed)"
        " VALUES ('batch_old', 'acme', 'k', '/v1/embeddings', 'file-old', '24h',"
        " 'in_progress', 100, 86500, '{}', '[]', 1, 0, 0)"
    )
    store = backend.open_another(clock=lambda: 2000.0)
    assert applied(backend) == [(1, 1000), (2, 1000), (3, 2000)]
    assert backend.sql("SELECT tenant_id FROM batch_files") == [(0,)]
    assert store.files(ACME) == [] and store.batches(ACME) == []
    legacy = store.batch_by_id("batch_old")
    assert legacy is not None and (legacy.tenant_id, legacy.tenant) == (0, "acme")
    assert store.legacy_tenants() == ["acme"]
    backend.sql(old_file.format("file-rolling"))  # a process not yet upgraded writes one
    assert store.file(ACME, "file-rolling") is None

    assert store.adopt("acme", ACME) == 3
    adopted = store.files(ACME, order="asc")
    assert [(f.id, f.tenant_id, f.tenant) for f in adopted] == [
        ("file-old", ACME, "acme"),
        ("file-rolling", ACME, "acme"),
    ]
    assert [b.id for b in store.batches(ACME)] == ["batch_old"]
    assert store.usage(ACME).open_batches == 1
    assert store.legacy_tenants() == []
