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
from tests.batches.test_contract import a_file, at_once

ALL_VERSIONS = [migration.version for migration in MIGRATIONS]


def applied(backend: Backend) -> list[tuple[int, int]]:
    return backend.sql("SELECT version, applied_at FROM batch_migrations ORDER BY version")


def test_opening_a_migrated_database_again_changes_nothing(backend: Backend) -> None:
    first = backend.open_another(clock=lambda: 1000.0)
    first.add_file(a_file("file-1"))
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]
    again = backend.open_another(clock=lambda: 2000.0)
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]
    assert again.file("acme", "file-1") == a_file("file-1")
    dialect = backend.open_dialect()
    with dialect.write(lock=False) as tx:
        assert migrate(tx, dialect.name, lambda: 3000.0) == []
    assert applied(backend) == [(version, 1000) for version in ALL_VERSIONS]


def test_stores_opening_an_empty_database_at_once_migrate_it_once(backend: Backend) -> None:
    opened: list[SqlBatchStore] = at_once([backend.open_another for _ in range(4)])
    assert [version for version, _ in applied(backend)] == ALL_VERSIONS
    opened[0].add_file(a_file("file-1"))
    assert opened[-1].file("acme", "file-1") == a_file("file-1")


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
    assert store.file("acme", "file-1") == a_file("file-1")
