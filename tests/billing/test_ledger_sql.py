"""What only the SQL ledgers have: migrations, several writers, opening, outages."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import asyncpg
import pytest

from headway.billing.ledger.base import HourlyUsage, Ledger, UsageQuery
from headway.billing.ledger.errors import LedgerUnavailable, SchemaTooNew
from headway.billing.ledger.migrations import (
    MIGRATIONS,
    Migration,
    migrate_postgres,
    migrate_sqlite,
    missing,
)
from headway.billing.ledger.open import open_ledger
from headway.billing.ledger.postgres import PostgresLedger
from headway.billing.ledger.sqlite import SQLiteLedger
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.server import free_port
from tests.billing.conftest import (
    DAY0,
    HOUR,
    Backend,
    by_name,
    postgres_sql,
    sqlite_sql,
    usage_event,
)


def test_migrations_are_numbered_in_order_from_one() -> None:
    assert [migration.version for migration in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_missing_lists_what_a_database_lacks_and_refuses_what_it_does_not_know() -> None:
    later = (*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "later", (), ()))
    assert missing(set(), later) == list(later)
    assert missing({1}, later) == list(later[1:])
    assert missing({migration.version for migration in later}, later) == []
    with pytest.raises(SchemaTooNew, match=r"\[99\]"):
        missing({1, 99}, later)


async def test_opening_again_applies_no_migration_twice_and_keeps_the_data(
    sql_backend: Backend,
) -> None:
    assert sql_backend.sql is not None
    await sql_backend.ledger.apply([usage_event("r1")], [])
    again = await sql_backend.open_another()
    versions = await sql_backend.sql("SELECT version FROM schema_migrations ORDER BY version")
    assert versions == [(migration.version,) for migration in MIGRATIONS]
    assert await again.counts() == {"processed": 1, "billable": 1, "dead": 0}


async def test_a_database_migrated_by_newer_code_is_refused(sql_backend: Backend) -> None:
    assert sql_backend.sql is not None
    await sql_backend.sql("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)")
    with pytest.raises(SchemaTooNew, match="99"):
        await sql_backend.open_another()


async def open_at_once(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> list[Ledger]:
    """Two ledgers opening one new database concurrently (both migrate it)."""
    if kind == "sqlite":
        path = tmp_path / "ledger.db"
        opened = await asyncio.gather(SQLiteLedger.open(path), SQLiteLedger.open(path))
    else:
        url: str = request.getfixturevalue("postgres_url")
        opened = await asyncio.gather(PostgresLedger.open(url), PostgresLedger.open(url))
    return list(opened)


async def versions_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> list[object]:
    statement = "SELECT version FROM schema_migrations ORDER BY version"
    if kind == "sqlite":
        rows = await sqlite_sql(tmp_path / "ledger.db", statement)
    else:
        rows = await postgres_sql(request.getfixturevalue("postgres_url"), statement)
    return [row[0] for row in rows]


def overlapping_batches() -> list[list[UsageEvent]]:
    """Batches of 40 out of 200 ids, each id in several batches."""
    events = [
        usage_event(f"r{i:03}", DAY0 + (i % 5) * HOUR, tenant=("acme", "beta")[i % 2], texts=i)
        for i in range(200)
    ]
    return [[events[(start * 13 + j * 7) % 200] for j in range(40)] for start in range(30)]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_ledgers_on_one_database_count_every_event_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    first, second = await open_at_once(kind, request, tmp_path)
    try:
        assert await versions_of(kind, request, tmp_path) == [m.version for m in MIGRATIONS]
        batches = overlapping_batches()
        applied = await asyncio.gather(
            *(
                (first if number % 2 else second).apply(batch, [])
                for number, batch in enumerate(batches)
            )
        )
        unique = {event.request_id for batch in batches for event in batch}
        assert sum(result.new for result in applied) == len(unique)
        assert sum(result.duplicates for result in applied) == 30 * 40 - len(unique)
        assert await first.check_aggregates() == []
        assert (await second.counts())["processed"] == len(unique)
        total_texts = sum(row.texts for row in await first.hours(0, 2**33, None))
        assert total_texts == sum(int(request_id[1:]) for request_id in unique)

        plans = await asyncio.gather(
            first.plan_exports(DAY0 + DAY0), second.plan_exports(DAY0 + DAY0)
        )
        assert plans[0] == plans[1]  # each intent recorded once, by one of the two
        assert sum(i.quantity for i in plans[0] if i.meter == "texts") == total_texts
    finally:
        await asyncio.gather(first.close(), second.close())


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_planners_running_at_once_record_each_intent_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    first, second = await open_at_once(kind, request, tmp_path)
    try:
        await first.apply(
            [usage_event(f"r{i}", DAY0 + i * 60, tenant=f"t{i % 7}") for i in range(300)], []
        )
        plans = await asyncio.gather(
            *((first, second)[n % 2].plan_exports(DAY0 + DAY0) for n in range(6))
        )
        assert all(plan == plans[0] for plan in plans)
        assert {intent.revision for intent in plans[0]} == {0}
        assert len({intent.key for intent in plans[0]}) == len(plans[0]) == 7 * 5 * 2
    finally:
        await asyncio.gather(first.close(), second.close())


async def test_sqlite_work_runs_on_one_thread_of_its_own_in_wal_and_full_sync(
    tmp_path: Path,
) -> None:
    ledger = await SQLiteLedger.open(tmp_path / "ledger.db")
    try:
        threads = {await ledger._run(lambda _: threading.get_ident()) for _ in range(5)}
        assert len(threads) == 1 and threading.get_ident() not in threads
        modes = await ledger._run(
            lambda db: (
                db.execute("PRAGMA journal_mode").fetchone()[0],
                db.execute("PRAGMA synchronous").fetchone()[0],
            )
        )
        assert modes == ("wal", 2)  # 2: FULL
    finally:
        await ledger.close()


async def test_open_ledger_is_postgres_given_a_url_else_sqlite(
    postgres_url: str, tmp_path: Path
) -> None:
    shared = await open_ledger(postgres_url, tmp_path / "unused.db")
    embedded = await open_ledger(None, tmp_path / "ledger.db")
    try:
        assert isinstance(shared, PostgresLedger)
        assert isinstance(embedded, SQLiteLedger)
        assert not (tmp_path / "unused.db").exists()
        assert (tmp_path / "ledger.db").exists()
    finally:
        await shared.close()
        await embedded.close()


async def test_an_unreachable_postgres_is_unavailable_and_its_password_not_told(
    tmp_path: Path,
) -> None:
    port = free_port()
    with pytest.raises(LedgerUnavailable, match=f"127.0.0.1:{port}") as raised:
        await open_ledger(f"postgresql://headway:hunter2@127.0.0.1:{port}/x", tmp_path / "l.db")
    assert "hunter2" not in str(raised.value)


async def test_an_sqlite_path_that_cannot_be_a_file_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(LedgerUnavailable, match="a-file"):
        await open_ledger(None, tmp_path / "a-file" / "ledger.db")


async def test_the_postgres_ledger_fails_clearly_while_postgres_is_down_then_recovers() -> None:
    with PostgresServer(fsync=False) as server:
        ledger = await PostgresLedger.open(server.url)
        try:
            await ledger.apply([usage_event("before")], [])
            server.kill()
            with pytest.raises(LedgerUnavailable):
                await ledger.apply([usage_event("during")], [])
            server.start()
            retried = await ledger.apply([usage_event("during"), usage_event("after")], [])
            assert retried.new == 2
            assert set(await ledger.processed_ids()) == {"before", "during", "after"}
        finally:
            await ledger.close()


# a ledger written before tenant ids ------------------------------------------------

_OLD_ROWS = (
    "INSERT INTO processed_requests (request_id, tenant, key_id, endpoint, alias, version,"
    " tier, texts, tokens, outcome, billable, queue_s, inference_s, total_s, gateway_id, at,"
    f" hour, recorded_at) VALUES ('old-1', 'acme', 'k1', 'embeddings', 'mini', 'v1',"
    f" 'interactive', 3, 30, 'served', TRUE, 0, 0, 0, 'gw-1', {DAY0 + 10}, {DAY0}, 0)",
    "INSERT INTO hourly_usage (tenant, alias, version, endpoint, tier, hour, requests, texts,"
    f" tokens) VALUES ('acme', 'mini', 'v1', 'embeddings', 'interactive', {DAY0}, 1, 3, 30)",
    "INSERT INTO export_intents (key, tenant, hour, meter, revision, quantity, created_at,"
    f" sent_at) VALUES ('acme:{DAY0}:texts:0', 'acme', {DAY0}, 'texts', 0, 3, 0, 1)",
)


async def write_old_ledger(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    """A database at migration 1 (the schema before tenant ids) holding one event, its
    aggregate and its sent texts intent, opened by this code (which migrates it)."""
    if kind == "sqlite":
        path = tmp_path / "ledger.db"
        db = sqlite3.connect(path, isolation_level=None)
        try:
            migrate_sqlite(db, MIGRATIONS[:1])
            for statement in _OLD_ROWS:
                db.execute(statement)
        finally:
            db.close()
        return await SQLiteLedger.open(path)
    url: str = request.getfixturevalue("postgres_url")
    conn = await asyncpg.connect(url)
    try:
        await migrate_postgres(conn, MIGRATIONS[:1])
        for statement in _OLD_ROWS:
            await conn.execute(statement)
    finally:
        await conn.close()
    return await PostgresLedger.open(url)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_ledger_of_the_old_schema_keeps_its_usage_as_legacy_rows_by_name(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ledger = await write_old_ledger(kind, request, tmp_path)
    try:
        everything = (0.0, 2.0**33)
        assert await ledger.hours(*everything, LEGACY_TENANT_ID) == [
            HourlyUsage(
                LEGACY_TENANT_ID, "acme", "mini", "v1", "embeddings", "interactive", DAY0, 1, 3, 30
            )
        ]
        # The tenant named acme now (id 1) sees none of it until an operator says it is its.
        assert await ledger.usage(UsageQuery(*everything, "day", 1)) == []
        await ledger.apply([usage_event("new-1", DAY0 + 20, tenant_id=1, texts=2, tokens=0)], [])
        assert await ledger.check_aggregates() == []
        # The old texts intent was sent: its hour's legacy tokens and the id's usage go now.
        planned = [(i.key, i.quantity) for i in await ledger.plan_exports(DAY0 + HOUR)]
        assert planned == [(f"{by_name('acme')}:{DAY0}:tokens:0", 30), (f"id=1:{DAY0}:texts:0", 2)]
        assert await ledger.adopt_legacy("acme", 1) == 1
        assert [(r.tenant_id, r.texts, r.tokens) for r in await ledger.hours(*everything, 1)] == [
            (1, 5, 30)
        ]
        assert await ledger.counts() == {"processed": 2, "billable": 2, "dead": 0}
        assert await ledger.check_aggregates() == []
    finally:
        await ledger.close()
