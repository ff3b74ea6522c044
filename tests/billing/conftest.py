"""Ledgers for the billing tests: in memory, on a SQLite file, on a throw-away Postgres.

One PostgreSQL serves the whole session (``fsync`` off: nothing here crashes it), and
each test gets a schema of its own, dropped afterwards; teardown checks that the
ledgers closed every connection they opened and that the server did not outlive the
session.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.memory import MemoryLedger
from headway.billing.ledger.postgres import PostgresLedger
from headway.billing.ledger.sqlite import SQLiteLedger
from headway.metering.event import UsageEvent
from headway.testing.postgres_server import PostgresServer

HOUR = 3600
DAY = 86400
DAY0 = 100 * DAY
"""A UTC midnight: the first hour of the test data."""


def usage_event(
    request_id: str,
    at: float = DAY0 + 10,
    *,
    tenant: str = "acme",
    alias: str = "mini",
    version: str = "v1",
    endpoint: str = "embeddings",
    tier: str = "interactive",
    texts: int = 1,
    tokens: int = 10,
    billable: bool = True,
) -> UsageEvent:
    return UsageEvent(
        request_id=request_id,
        tenant=tenant,
        key_id="k1",
        endpoint=endpoint,  # type: ignore[arg-type]
        alias=alias,
        version=version,
        tier=tier,  # type: ignore[arg-type]
        texts=texts,
        tokens=tokens,
        outcome="served" if billable else "deadline_exceeded",
        billable=billable,
        queue_s=0.01,
        inference_s=0.02,
        total_s=0.05,
        gateway_id="gw-1",
        at=at,
    )


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
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A URL whose connections see a fresh, empty schema of their own (asyncpg passes
    the URL's other parameters as server settings: ``search_path``, and an
    ``application_name`` that finds the test's connections for the leak check).
    A schema, not a database: ten times quicker to create."""
    name = f"t_{secrets.token_hex(6)}"
    postgres_server.psql(f"CREATE SCHEMA {name}")
    yield f"{postgres_server.url}?search_path={name}&application_name={name}"
    try:
        assert wait_for(lambda: not connections_named(postgres_server, name)), (
            f"connections of {name} outlived the test's ledgers"
        )
    finally:
        postgres_server.psql(f"DROP SCHEMA {name} CASCADE")


Rows = list[tuple[Any, ...]]


@dataclass
class Backend:
    """A ledger under test, and a way around it to its database."""

    kind: str
    ledger: Ledger
    open_another: Callable[[], Awaitable[Ledger]]
    """Another ledger on the same database (memory: the same one)."""
    sql: Callable[[str], Awaitable[Rows]] | None
    """Run one statement on the database directly; None in memory."""
    opened: list[Ledger] = field(default_factory=list)


async def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "memory":
        memory = MemoryLedger()

        async def same() -> Ledger:
            return memory

        return Backend(kind, memory, same, None)
    if kind == "sqlite":
        path = tmp_path / "ledger.db"

        async def open_sqlite() -> Ledger:
            return await SQLiteLedger.open(path)

        return Backend(kind, await open_sqlite(), open_sqlite, lambda s: sqlite_sql(path, s))
    url: str = request.getfixturevalue("postgres_url")

    async def open_postgres() -> Ledger:
        return await PostgresLedger.open(url)

    return Backend(kind, await open_postgres(), open_postgres, lambda s: postgres_sql(url, s))


async def sqlite_sql(path: Path, statement: str) -> Rows:
    def run() -> Rows:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            return db.execute(statement).fetchall()
        finally:
            db.close()

    return await asyncio.to_thread(run)


async def postgres_sql(url: str, statement: str) -> Rows:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(statement)]
    finally:
        await conn.close()


async def backend_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    backend = await open_backend(request.param, request, tmp_path)
    original = backend.open_another

    async def tracked() -> Ledger:
        ledger = await original()
        backend.opened.append(ledger)
        return ledger

    backend.open_another = tracked
    try:
        yield backend
    finally:
        for ledger in [backend.ledger, *backend.opened]:
            await ledger.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for opened in backend_fixture(request, tmp_path):
        yield opened


@pytest.fixture(params=["sqlite", "postgres"])
async def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for opened in backend_fixture(request, tmp_path):
        yield opened
