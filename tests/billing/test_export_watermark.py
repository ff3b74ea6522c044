"""Export planning from a watermark: only new hours and late ones are read again; late
events become a revision; keys stay within the provider's limits for any tenant name.

The same tests on memory, SQLite and Postgres (``backend``), plus what only the SQL
ledgers can show (a key recorded before keys were bounded, racing writers).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.memory import MAX_KEY_CHARS, MemoryLedger
from headway.metering.event import LEGACY_TENANT_ID
from tests.billing.conftest import ACME, DAY0, HOUR, Backend, usage_event


async def watermark(backend: Backend) -> int:
    if backend.sql is None:
        assert isinstance(backend.ledger, MemoryLedger)
        return backend.ledger.watermark
    [(value,)] = await backend.sql("SELECT planned_before FROM export_watermark")
    return int(value)


async def add_behind_its_back(backend: Backend, hour: int, texts: int) -> None:
    """An aggregate row written without ``apply``: only a plan that rescans sees it."""
    if backend.sql is None:
        assert isinstance(backend.ledger, MemoryLedger)
        key = (ACME, "acme", "ghost", "v1", "embeddings", "interactive", hour)
        backend.ledger.hourly[key] = (1, texts, 0)
        return
    await backend.sql(
        "INSERT INTO hourly_usage (tenant_id, tenant, alias, version, endpoint, tier, hour,"
        f" requests, texts, tokens) VALUES ({ACME}, 'acme', 'ghost', 'v1', 'embeddings',"
        f" 'interactive', {hour}, 1, {texts}, 0)"
    )


async def test_a_plan_reads_from_the_watermark_on_and_late_hours_again(backend: Backend) -> None:
    ledger = backend.ledger
    await ledger.apply([usage_event("a", DAY0 + 10, texts=2, tokens=0)], [])
    first = await ledger.plan_exports(DAY0 + 2 * HOUR + 5)
    assert [(i.hour, i.meter, i.quantity) for i in first] == [(DAY0, "texts", 2)]
    assert await watermark(backend) == DAY0 + 2 * HOUR  # every hour below it planned
    for intent in first:
        await ledger.mark_sent(intent.key, DAY0 + 3 * HOUR)

    # An hour below the watermark that no apply touched is not read again ...
    await add_behind_its_back(backend, DAY0 + HOUR, 50)
    assert await ledger.plan_exports(DAY0 + 3 * HOUR) == []
    assert await watermark(backend) == DAY0 + 3 * HOUR
    assert await ledger.plan_exports(DAY0) == []  # a clock behind never moves it back
    assert await watermark(backend) == DAY0 + 3 * HOUR

    # ... a late event is: its hour is planned again, whole, as a further revision.
    await ledger.apply([usage_event("late", DAY0 + HOUR + 7, texts=3, tokens=0)], [])
    late = await ledger.plan_exports(DAY0 + 3 * HOUR)
    assert [(i.key, i.quantity) for i in late] == [(f"id={ACME}:{DAY0 + HOUR}:texts:0", 53)]
    await ledger.apply([usage_event("later", DAY0 + 20, texts=4, tokens=0)], [])
    again = await ledger.plan_exports(DAY0 + 3 * HOUR)
    assert [(i.key, i.quantity) for i in again if i.hour == DAY0] == [
        (f"id={ACME}:{DAY0}:texts:1", 4)  # only the difference, under the next revision
    ]
    assert await ledger.check_aggregates() == [
        f"{key_of(DAY0 + HOUR)}: aggregate row (1, 50, 0) has no billable events"
    ]


def key_of(hour: int) -> tuple[object, ...]:
    return (ACME, "acme", "ghost", "v1", "embeddings", "interactive", hour)


async def test_keys_stay_short_and_ascii_for_any_tenant_name(backend: Backend) -> None:
    names = ["x" * 300, "客户-Ünïcødé-🚀" * 20, "a:b=c d"]
    events = [
        usage_event(f"n{i}", DAY0 + 10, tenant=name, tenant_id=LEGACY_TENANT_ID)
        for i, name in enumerate(names)
    ]
    events += [usage_event("long-id", DAY0 + 10, tenant="y" * 300, tenant_id=2**63 - 1)]
    await backend.ledger.apply(events, [])
    intents = await backend.ledger.plan_exports(DAY0 + HOUR)
    assert len(intents) == 2 * len(events)
    assert len({i.key for i in intents}) == len(intents)
    assert all(len(i.key) <= MAX_KEY_CHARS and i.key.isascii() for i in intents)
    assert {i.tenant for i in intents} == {*names, "y" * 300}  # the names themselves kept


async def test_an_overlong_key_recorded_before_is_rekeyed_before_it_is_sent(
    sql_backend: Backend,
) -> None:
    """Before keys were bounded a legacy intent was keyed by its name: the provider
    refused it, so it was never counted, and it goes again under a bounded key."""
    assert sql_backend.sql is not None
    name = "z" * 300
    await sql_backend.sql(
        "INSERT INTO export_intents (key, tenant_id, tenant, hour, meter, revision, quantity,"
        f" created_at) VALUES ('{name}:{DAY0}:texts:0', 0, '{name}', {DAY0}, 'texts', 0, 5, 0)"
    )
    [intent] = await sql_backend.ledger.plan_exports(DAY0 + HOUR)
    assert len(intent.key) <= MAX_KEY_CHARS and intent.quantity == 5
    [(stored,)] = await sql_backend.sql("SELECT key FROM export_intents")
    assert stored == intent.key
    await sql_backend.ledger.mark_sent(intent.key, DAY0 + HOUR)
    assert await sql_backend.ledger.plan_exports(DAY0 + HOUR) == []


async def test_late_events_racing_plans_are_all_reported_once(sql_backend: Backend) -> None:
    """Writers and planners at once, on two ledgers of one database: at the end the
    intents of every hour sum to its total, none reported twice."""
    rng = random.Random(7)
    writer, planner = sql_backend.ledger, await sql_backend.open_another()
    hours = [DAY0 + h * HOUR for h in range(4)]
    batches = [
        [
            usage_event(
                f"b{b}-{i}", rng.choice(hours) + rng.randrange(HOUR), texts=rng.randint(1, 9)
            )
            for i in range(20)
        ]
        for b in range(15)
    ]

    async def write() -> None:
        for batch in batches:
            await writer.apply(batch, [])

    async def plan() -> None:
        for step in range(15):
            await planner.plan_exports(DAY0 + 4 * HOUR + step)

    await asyncio.gather(write(), plan())
    await planner.plan_exports(DAY0 + 5 * HOUR)
    assert await reported_texts(planner) == await total_texts(writer)


async def reported_texts(ledger: Ledger) -> dict[int, int]:
    sums: Counter[int] = Counter()
    for intent in await ledger.plan_exports(DAY0 + 5 * HOUR):  # all unsent: none were sent
        if intent.meter == "texts":
            sums[intent.hour] += intent.quantity
    return dict(sums)


async def total_texts(ledger: Ledger) -> dict[int, int]:
    sums: Counter[int] = Counter()
    for row in await ledger.hours(DAY0, DAY0 + 5 * HOUR, None):
        sums[row.hour] += row.texts
    return dict(sums)
