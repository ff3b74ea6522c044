"""The batch store under test: on a SQLite file, and on a throw-away Postgres (a schema
of its own); ``open_another`` opens a second store on the same database, as a second
process would, and ``sql`` runs a statement beside the store.

The folder's tier is ``service`` (``tests/conftest.py``); the file store's module, which
starts nothing, names ``unit``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headway.batches.open import postgres_batch_store, sqlite_batch_store
from headway.batches.sql import SqlBatchStore
from headway.storage.dialect import Dialect
from headway.storage.postgres import PostgresDialect
from headway.storage.sqlite import SqliteDialect
from tests.registry.conftest import postgres_sql, sqlite_sql


@dataclass
class Backend:
    kind: str
    open_another: Callable[..., SqlBatchStore]
    """A new store on the test's database; keywords go to the store's constructor."""
    sql: Callable[[str], list[tuple[Any, ...]]]
    """Run one statement on the database directly (committed); its rows."""
    open_dialect: Callable[[], Dialect]
    """The seam under a store, on the same database (closed after the test)."""


def backend_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "sqlite":
        path = tmp_path / "batches.sqlite3"
        return Backend(
            kind,
            lambda **options: sqlite_batch_store(path, **options),
            lambda statement: sqlite_sql(path, statement),
            lambda: SqliteDialect(path, 10.0),
        )
    url: str = request.getfixturevalue("libpq_url")

    def open_another(**options: Any) -> SqlBatchStore:
        store = postgres_batch_store(url, **options)
        request.addfinalizer(store.close)
        return store

    def open_dialect() -> Dialect:
        dialect = PostgresDialect(url, 10.0)
        request.addfinalizer(dialect.close)
        return dialect

    return Backend(kind, open_another, lambda statement: postgres_sql(url, statement), open_dialect)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return backend_of(request.param, request, tmp_path)


@pytest.fixture
def store(backend: Backend) -> SqlBatchStore:
    return backend.open_another()
