"""The ledger on PostgreSQL (asyncpg): shared mode, consumers on several machines.

``apply`` is one transaction of a few statements whatever the batch size, each taking whole
columns as array parameters (``unnest``): ``ON CONFLICT (request_id) DO NOTHING RETURNING``
on ``processed_requests`` names exactly the new events, and one upsert adds their billable
sums to ``hourly_usage`` (``DO UPDATE`` adds to the stored row).

READ COMMITTED is enough, and is what ``plan_exports`` needs. No decision in ``apply`` rests
on a snapshot: the primary key's index makes an insert of an id that another open
transaction inserted wait for its commit (then do nothing) or rollback (then insert), and
``DO UPDATE`` locks the row and adds to its latest committed values, so concurrent batches
never lose an increment. Both kinds of lock are taken in sorted order (ids, then aggregate
keys), so two writers cannot deadlock. ``plan_exports`` serializes planners with an advisory
lock and must then *see* the previous planner's intents: each READ COMMITTED statement takes
a fresh snapshot after the lock was granted, where REPEATABLE READ would keep the one taken
when the transaction began waiting.

The watermark row fences the two: ``plan_exports`` locks it ``FOR UPDATE`` before it reads
the totals, ``apply`` reads it ``FOR SHARE`` after adding to them. An ``apply`` that locked
it first commits before the plan reads; one that comes after waits for the plan's commit,
reads the moved watermark, and marks its hour late: no addition falls between two plans.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from headway.billing.ledger.base import (
    Applied,
    DeadLetter,
    ExportIntent,
    HourlyUsage,
    UsageQuery,
    UsageRow,
)
from headway.billing.ledger.errors import LedgerError, LedgerUnavailable, UnknownIntent
from headway.billing.ledger.memory import (
    HourKey,
    aggregate_problems,
    bounded_key,
    check_adoption,
    first_of_each,
    floor_hour,
    hour_range,
    hourly_sums,
    keyed_sums,
    late_hours,
    new_intents,
    next_watermark,
    overlong,
)
from headway.billing.ledger.migrations import migrate_postgres
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent

T = TypeVar("T")

PLAN_LOCK_KEY = 0x6865_6164_7761_7A  # held by the one plan_exports running on a database

_EVENT_COLUMNS = (
    ("request_id", "text"),
    ("tenant_id", "int8"),
    ("tenant", "text"),
    ("key_id", "text"),
    ("endpoint", "text"),
    ("alias", "text"),
    ("version", "text"),
    ("tier", "text"),
    ("texts", "int8"),
    ("tokens", "int8"),
    ("outcome", "text"),
    ("billable", "bool"),
    ("queue_s", "float8"),
    ("inference_s", "float8"),
    ("total_s", "float8"),
    ("gateway_id", "text"),
    ("at", "float8"),
    ("hour", "int8"),
)
_RECORDED_AT = f"${len(_EVENT_COLUMNS) + 1}"
_INSERT_PROCESSED = (
    f"INSERT INTO processed_requests ({', '.join(name for name, _ in _EVENT_COLUMNS)},"
    f" recorded_at) SELECT *, {_RECORDED_AT}::float8 FROM unnest("
    + ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(_EVENT_COLUMNS, 1))
    + ") ON CONFLICT (request_id) DO NOTHING RETURNING request_id"
)
_KEY = "tenant_id, tenant, alias, version, endpoint, tier, hour"
_ORDER = "hour, tenant_id, tenant, alias, version, endpoint, tier"
_ADD = (
    f" ON CONFLICT ({_KEY}) DO UPDATE SET"
    " requests = hourly_usage.requests + EXCLUDED.requests,"
    " texts = hourly_usage.texts + EXCLUDED.texts,"
    " tokens = hourly_usage.tokens + EXCLUDED.tokens"
)
_ADD_HOURLY = (
    f"INSERT INTO hourly_usage ({_KEY}, requests, texts, tokens)"
    " SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[],"
    f" $6::text[], $7::int8[], $8::int8[], $9::int8[], $10::int8[]){_ADD}"
)
_LEGACY = f"tenant_id = {LEGACY_TENANT_ID} AND tenant = $1"
_ADOPT_ROWS = (
    # The legacy rows summed into the id's, locked in key order (as ``apply`` locks them).
    f"INSERT INTO hourly_usage ({_KEY}, requests, texts, tokens)"
    " SELECT $2::int8, tenant, alias, version, endpoint, tier, hour, requests, texts, tokens"
    f" FROM hourly_usage WHERE {_LEGACY} ORDER BY {_ORDER}{_ADD}"
)
_INTENT = "key, tenant_id, tenant, hour, meter, revision, quantity, sent_at"
_PLANNED = "((hour >= $1 AND hour < $2) OR hour IN (SELECT hour FROM export_late_hours))"
"""The hours a plan reads: from the watermark to the last closed one, and the late ones."""
_INSERT_DEAD = (
    "INSERT INTO dead_letters (data, reason, source, recorded_at)"
    " SELECT *, $4::float8 FROM unnest($1::bytea[], $2::text[], $3::text[])"
)
_SUMS = "SUM(requests)::int8, SUM(texts)::int8, SUM(tokens)::int8"
_IN_RANGE = "hour >= $1 AND hour < $2 AND ($3::int8 IS NULL OR tenant_id = $3)"
_USAGE = {
    "hour": f"SELECT tenant_id, tenant, hour AS period, NULL, NULL, {_SUMS} FROM hourly_usage"
    f" WHERE {_IN_RANGE} GROUP BY tenant_id, tenant, hour ORDER BY tenant_id, tenant, period",
    "day": f"SELECT tenant_id, tenant, hour - hour % 86400 AS period, NULL, NULL, {_SUMS}"
    f" FROM hourly_usage WHERE {_IN_RANGE} GROUP BY tenant_id, tenant, period"
    " ORDER BY tenant_id, tenant, period",
    "model": f"SELECT tenant_id, tenant, $4::int8, alias, version, {_SUMS} FROM hourly_usage"
    f" WHERE {_IN_RANGE} GROUP BY tenant_id, tenant, alias, version"
    " ORDER BY tenant_id, tenant, alias, version",
}
_UNAVAILABLE = (
    OSError,  # refused, reset, unreachable; TimeoutError is one
    asyncpg.InterfaceError,  # the connection is closed or broken
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, starting up
    asyncpg.exceptions.InsufficientResourcesError,  # too many connections, disk full
    asyncpg.exceptions.TransactionRollbackError,  # serialization failure, deadlock
)


class PostgresLedger:
    """The ``Ledger`` protocol on a connection pool; build it with ``await open(url)``."""

    def __init__(self, pool: asyncpg.Pool, clock: Callable[[], float]) -> None:
        self._pool = pool
        self._clock = clock

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        max_connections: int = 4,
        connect_timeout_s: float = 10.0,
    ) -> PostgresLedger:
        """Connect and apply the missing migrations (``migrations.py`` serializes two
        processes opening at once)."""
        try:
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=max_connections, timeout=connect_timeout_s
            )
        except (*_UNAVAILABLE, asyncpg.PostgresError) as exc:
            raise LedgerUnavailable(
                f"cannot connect to the Postgres ledger at {redacted(url)}: {exc}"
            ) from exc
        ledger = cls(pool, clock)
        try:
            await ledger._run(lambda conn: migrate_postgres(conn, clock=clock))
        except BaseException:
            pool.terminate()
            raise
        return ledger

    async def _run(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        try:
            async with self._pool.acquire() as conn:
                return await work(conn)
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"the Postgres ledger failed: {exc!r}") from exc
        except asyncpg.PostgresError as exc:
            raise LedgerError(f"the Postgres ledger refused the call: {exc!r}") from exc

    async def apply(self, events: Sequence[UsageEvent], dead: Sequence[DeadLetter]) -> Applied:
        unique = sorted(first_of_each(events), key=lambda event: event.request_id)
        if not unique and not dead:
            return Applied(new=0, duplicates=len(events), dead=0)
        now = self._clock()

        async def write(conn: asyncpg.Connection) -> int:
            async with conn.transaction():
                inserted = {
                    row[0] for row in await conn.fetch(_INSERT_PROCESSED, *_columns(unique), now)
                }
                new = [event for event in unique if event.request_id in inserted]
                sums = hourly_sums(new)
                if sums:
                    await conn.execute(
                        _ADD_HOURLY, *_transpose([(*key, *row) for key, row in sums.items()])
                    )
                    await _mark_late(conn, sums)
                if dead:
                    rows = [(letter.data, letter.reason, letter.source) for letter in dead]
                    await conn.execute(_INSERT_DEAD, *_transpose(rows), now)
            return len(new)

        new = await self._run(write)
        return Applied(new=new, duplicates=len(events) - new, dead=len(dead))

    async def usage(self, query: UsageQuery) -> list[UsageRow]:
        low, high = hour_range(query.start, query.end)
        params: list[Any] = [low, high, query.tenant_id]
        if query.group_by == "model":
            params.append(floor_hour(query.start))
        rows = await self._run(lambda conn: conn.fetch(_USAGE[query.group_by], *params))
        return [UsageRow(*row) for row in rows]

    async def hours(self, start: float, end: float, tenant_id: int | None) -> list[HourlyUsage]:
        low, high = hour_range(start, end)
        rows = await self._run(
            lambda conn: conn.fetch(
                f"SELECT {_KEY}, requests, texts, tokens FROM hourly_usage WHERE {_IN_RANGE}"
                f" ORDER BY {_ORDER}",
                low,
                high,
                tenant_id,
            )
        )
        return [HourlyUsage(*row) for row in rows]

    async def plan_exports(self, closed_before: float) -> list[ExportIntent]:
        closed = floor_hour(closed_before)
        now = self._clock()

        async def plan(conn: asyncpg.Connection) -> list[ExportIntent]:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", PLAN_LOCK_KEY)
                low: int = await conn.fetchval(
                    "SELECT planned_before FROM export_watermark WHERE id = 1 FOR UPDATE"
                )
                totals = await conn.fetch(
                    "SELECT tenant_id, tenant, hour, SUM(texts)::int8, SUM(tokens)::int8"
                    f" FROM hourly_usage WHERE {_PLANNED} GROUP BY tenant_id, tenant, hour",
                    low,
                    closed,
                )
                reported = await conn.fetch(
                    "SELECT tenant_id, tenant, hour, meter, SUM(quantity)::int8, COUNT(*)"
                    f" FROM export_intents WHERE {_PLANNED}"
                    " GROUP BY tenant_id, tenant, hour, meter",
                    low,
                    closed,
                )
                intents = new_intents(
                    {(row[0], row[1], row[2]): (row[3], row[4]) for row in totals},
                    {(row[0], row[1], row[2], row[3]): (row[4], row[5]) for row in reported},
                )
                if intents:
                    rows = [
                        (i.key, i.tenant_id, i.tenant, i.hour, i.meter, i.revision, i.quantity)
                        for i in intents
                    ]
                    await conn.execute(
                        "INSERT INTO export_intents"
                        " (key, tenant_id, tenant, hour, meter, revision, quantity, created_at)"
                        " SELECT *, $8::float8 FROM unnest($1::text[], $2::int8[], $3::text[],"
                        " $4::int8[], $5::text[], $6::int4[], $7::int8[])",
                        *_transpose(rows),
                        now,
                    )
                await conn.execute(
                    "UPDATE export_watermark SET planned_before = $1 WHERE id = 1",
                    next_watermark(low, closed_before),
                )
                await conn.execute("DELETE FROM export_late_hours")
                unsent = await conn.fetch(
                    f"SELECT {_INTENT} FROM export_intents WHERE sent_at IS NULL"
                    " ORDER BY hour, tenant_id, tenant, meter, revision, key"
                )
                return [await _bounded(conn, ExportIntent(*row)) for row in unsent]

        return await self._run(plan)

    async def mark_sent(self, key: str, at: float) -> None:
        async def mark(conn: asyncpg.Connection) -> bool:
            await conn.execute(
                "UPDATE export_intents SET sent_at = $1 WHERE key = $2 AND sent_at IS NULL",
                at,
                key,
            )
            found: bool = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM export_intents WHERE key = $1)", key
            )
            return found

        if not await self._run(mark):
            raise UnknownIntent(f"no export intent has key {key!r}")

    async def adopt_legacy(self, tenant: str, tenant_id: int) -> int:
        check_adoption(tenant_id)

        async def adopt(conn: asyncpg.Connection) -> int:
            async with conn.transaction():
                moved: int = await conn.fetchval(
                    "WITH moved AS (UPDATE processed_requests SET tenant_id = $2"
                    f" WHERE {_LEGACY} RETURNING 1) SELECT COUNT(*) FROM moved",
                    tenant,
                    tenant_id,
                )
                await conn.execute(_ADOPT_ROWS, tenant, tenant_id)
                await conn.execute(f"DELETE FROM hourly_usage WHERE {_LEGACY}", tenant)
                await conn.execute(
                    f"UPDATE export_intents SET tenant_id = $2 WHERE {_LEGACY}", tenant, tenant_id
                )
                adopted = await conn.fetch(
                    "SELECT DISTINCT hour FROM hourly_usage WHERE tenant_id = $1 AND tenant = $2",
                    tenant_id,
                    tenant,
                )
                await _mark_late(conn, [(0, "", "", "", "", "", row[0]) for row in adopted])
            return moved

        return await self._run(adopt)

    async def check_aggregates(self) -> list[str]:
        """Both sides read from one snapshot (REPEATABLE READ), whatever commits meanwhile."""

        async def read(conn: asyncpg.Connection) -> list[str]:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                expected = await conn.fetch(
                    f"SELECT {_KEY}, COUNT(*), SUM(texts)::int8, SUM(tokens)::int8"
                    f" FROM processed_requests WHERE billable GROUP BY {_KEY}"
                )
                stored = await conn.fetch(
                    f"SELECT {_KEY}, requests, texts, tokens FROM hourly_usage"
                )
            return aggregate_problems(keyed_sums(expected), keyed_sums(stored))

        return await self._run(read)

    async def counts(self) -> dict[str, int]:
        row = await self._run(
            lambda conn: conn.fetchrow(
                "SELECT (SELECT COUNT(*) FROM processed_requests),"
                " (SELECT COUNT(*) FROM processed_requests WHERE billable),"
                " (SELECT COUNT(*) FROM dead_letters)"
            )
        )
        return {"processed": row[0], "billable": row[1], "dead": row[2]}

    async def processed_ids(self) -> dict[str, int]:
        rows = await self._run(
            lambda conn: conn.fetch(
                "SELECT request_id, COUNT(*) FROM processed_requests GROUP BY request_id"
            )
        )
        return {row[0]: row[1] for row in rows}

    async def close(self) -> None:
        await self._pool.close()


async def _mark_late(conn: asyncpg.Connection, keys: Iterable[HourKey]) -> None:
    """In the writer's transaction, after its aggregates: the watermark read under a
    share lock (the fence with ``plan_exports``), then the hours below it recorded."""
    watermark: int = await conn.fetchval(
        "SELECT planned_before FROM export_watermark WHERE id = 1 FOR SHARE"
    )
    hours = late_hours(keys, watermark)
    if hours:
        await conn.execute(
            "INSERT INTO export_late_hours (hour) SELECT unnest($1::int8[]) ON CONFLICT DO NOTHING",
            hours,
        )


async def _bounded(conn: asyncpg.Connection, intent: ExportIntent) -> ExportIntent:
    """``intent``, rekeyed first if its key is ``overlong`` (never accepted, so never
    counted: safe to send under another key)."""
    if not overlong(intent.key):
        return intent
    key = bounded_key(intent)
    await conn.execute("UPDATE export_intents SET key = $1 WHERE key = $2", key, intent.key)
    return replace(intent, key=key)


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _columns(events: Sequence[UsageEvent]) -> list[list[Any]]:
    return [[getattr(event, name) for event in events] for name, _ in _EVENT_COLUMNS]


def _transpose(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows (at least one) as columns, for ``unnest``."""
    return [list(column) for column in zip(*rows, strict=True)]
