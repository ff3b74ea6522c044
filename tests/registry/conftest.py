"""The registry under test: on a SQLite file, and on a throw-away Postgres (a schema of
its own), each with a fake clock; ``open_another`` opens a second registry on the same
database, as a second process would, and ``sql`` runs a statement around the registry."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from headway.registry.postgres import PostgresRegistry
from headway.registry.sql import SqlRegistry
from headway.registry.sqlite import Registry
from tests.fakes import FakeClock


@dataclass
class Backend:
    kind: str
    clock: FakeClock
    open_another: Callable[[], SqlRegistry]
    sql: Callable[[str], list[tuple[Any, ...]]]
    """Run one statement on the database directly (committed); its rows."""
    location: str = ""
    """The SQLite file's path, or the Postgres URL."""


def backend_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    clock = FakeClock(now=1_000_000.0)
    if kind == "sqlite":
        path = tmp_path / "registry.sqlite3"
        return Backend(
            kind,
            clock,
            lambda: Registry(path, clock=clock),
            lambda s: sqlite_sql(path, s),
            str(path),
        )
    url: str = request.getfixturevalue("libpq_url")

    def open_another() -> SqlRegistry:
        registry = PostgresRegistry(url, clock=clock)
        request.addfinalizer(registry.close)
        return registry

    return Backend(kind, clock, open_another, lambda s: postgres_sql(url, s), url)


def sqlite_sql(path: Path, statement: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        return db.execute(statement).fetchall()
    finally:
        db.close()


def postgres_sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute(statement)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return backend_of(request.param, request, tmp_path)


@pytest.fixture
def registry(backend: Backend) -> SqlRegistry:
    return backend.open_another()


@pytest.fixture
def clock(backend: Backend) -> FakeClock:
    return backend.clock
