"""One throw-away PostgreSQL for the whole session, and a fresh schema per test.

A plugin (``pytest_plugins`` in ``tests/conftest.py``), so every folder that needs
Postgres shares one server: ``fsync`` off, since nothing here crashes it. Each test's
schema is dropped afterwards; teardown checks that the test closed every connection it
opened (they carry the schema's name as ``application_name``) and that the server did
not outlive the session.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator

import pytest

from headway_tools.testing.postgres_server import PostgresServer


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # poll interval of the condition wait above
    return True


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer(fsync=False)
    try:
        server.start()
        pid = server.pid
        yield server
    finally:
        server.close()
    assert pid is not None and wait_for(lambda: not process_alive(pid)), "postgres outlived"


def connections_named(server: PostgresServer, name: str) -> int:
    return int(
        server.psql(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'")
    )


@pytest.fixture
def postgres_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty schema (a schema, not a database: ten times quicker to create)."""
    name = f"t_{secrets.token_hex(6)}"
    postgres_server.psql(f"CREATE SCHEMA {name}")
    yield name
    try:
        assert wait_for(lambda: not connections_named(postgres_server, name)), (
            f"connections of {name} outlived the test"
        )
    finally:
        postgres_server.psql(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, postgres_schema: str) -> str:
    """A URL for asyncpg whose connections see the test's schema: asyncpg passes the
    URL's other parameters as server settings (``search_path``, ``application_name``)."""
    name = postgres_schema
    return f"{postgres_server.url}?search_path={name}&application_name={name}"


@pytest.fixture
def libpq_url(postgres_server: PostgresServer, postgres_schema: str) -> str:
    """The same for libpq (psycopg), which takes server settings as ``options``."""
    name = postgres_schema
    return f"{postgres_server.url}?options=-csearch_path%3D{name}&application_name={name}"
