"""Ledgers for the billing tests: in memory, on a SQLite file, on a throw-away Postgres.

The Postgres (one a session, a schema a test, a check that the ledgers closed every
connection they opened) comes from ``tests/postgres_fixtures.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
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
from tests.postgres_fixtures import wait_for as wait_for  # test_postgres_server's

HOUR = 3600
DAY = 86400
DAY0 = 100 * DAY
"""A UTC midnight: the first hour of the test data."""


ACME, BETA, GAMMA = 1, 2, 3
_IDS = {"acme": ACME, "beta": BETA, "gamma": GAMMA}


def tenant_id_of(tenant: str) -> int:
    """A test's stand-in for the registry's id of a tenant first created with this name."""
    return _IDS.get(tenant) or 1000 + zlib.crc32(tenant.encode()) % 1_000_000


def by_name(tenant: str) -> str:
    """What names a legacy row's intents: a hash of its name, short and ASCII."""
    return "name-" + hashlib.sha256(tenant.encode()).hexdigest()[:32]


def usage_event(
    request_id: str,
    at: float = DAY0 + 10,
    *,
    tenant: str = "acme",
    tenant_id: int | None = None,
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
        tenant_id=tenant_id_of(tenant) if tenant_id is None else tenant_id,
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
