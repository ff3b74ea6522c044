"""The ``Ledger`` contract, the same tests on memory, SQLite and Postgres."""

from __future__ import annotations

import random

import pytest

from headway.billing.ledger.base import (
    Applied,
    DeadLetter,
    ExportIntent,
    HourlyUsage,
    Ledger,
    UsageQuery,
    UsageRow,
)
from headway.billing.ledger.errors import LedgerError, UnknownIntent
from headway.billing.ledger.memory import MemoryLedger
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent, decode
from tests.billing.conftest import (
    ACME,
    BETA,
    DAY,
    DAY0,
    HOUR,
    Backend,
    by_name,
    tenant_id_of,
    usage_event,
)
from tests.builders import schema_1

EVERYTHING = (0.0, 2.0**33)
GHOST = 7


async def snapshot(ledger: Ledger) -> tuple[object, ...]:
    """Everything the ledger answers, to compare two states."""
    return (
        await ledger.hours(*EVERYTHING, None),
        await ledger.counts(),
        await ledger.processed_ids(),
        await ledger.usage(UsageQuery(*EVERYTHING, "day", None)),
    )


async def test_new_events_are_recorded_and_aggregated(backend: Backend) -> None:
    ledger = backend.ledger
    applied = await ledger.apply(
        [
            usage_event("r1", DAY0 + 10, texts=2, tokens=20),
            usage_event("r2", DAY0 + 20, texts=3, tokens=30),
            usage_event("r3", DAY0 + HOUR, tenant="beta", endpoint="rerank", tier="batch"),
        ],
        [],
    )
    assert applied == Applied(new=3, duplicates=0, dead=0)
    assert await ledger.hours(*EVERYTHING, None) == [
        HourlyUsage(ACME, "acme", "mini", "v1", "embeddings", "interactive", DAY0, 2, 5, 50),
        HourlyUsage(BETA, "beta", "mini", "v1", "rerank", "batch", DAY0 + HOUR, 1, 1, 10),
    ]
    assert await ledger.counts() == {"processed": 3, "billable": 3, "dead": 0}
    assert await ledger.processed_ids() == {"r1": 1, "r2": 1, "r3": 1}
    assert await ledger.check_aggregates() == []


async def test_a_duplicate_in_a_later_batch_changes_nothing(backend: Backend) -> None:
    ledger = backend.ledger
    await ledger.apply([usage_event("r1"), usage_event("r2")], [])
    before = await snapshot(ledger)
    applied = await ledger.apply([usage_event("r2"), usage_event("r1")], [])
    assert applied == Applied(new=0, duplicates=2, dead=0)
    assert await snapshot(ledger) == before


async def test_a_duplicate_within_a_batch_counts_once_and_the_first_wins(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    applied = await ledger.apply(
        [
            usage_event("r1", texts=2),
            usage_event("r2", texts=5),
            usage_event("r1", texts=7),  # a redelivery that (wrongly) differs: ignored
            usage_event("r2", texts=5),
        ],
        [],
    )
    assert applied == Applied(new=2, duplicates=2, dead=0)
    [row] = await ledger.hours(*EVERYTHING, None)
    assert (row.requests, row.texts) == (2, 7)
    assert await ledger.processed_ids() == {"r1": 1, "r2": 1}


async def test_replaying_everything_from_the_start_changes_nothing(backend: Backend) -> None:
    ledger = backend.ledger
    stream = [
        usage_event(f"r{i}", DAY0 + i * 700, tenant=("acme", "beta")[i % 2], billable=i % 5 != 0)
        for i in range(60)
    ]
    for start in range(0, len(stream), 7):
        await ledger.apply(stream[start : start + 7], [])
    before = await snapshot(ledger)
    for start in range(0, len(stream), 25):  # other batch boundaries
        applied = await ledger.apply(stream[start : start + 25], [])
        assert applied.new == 0
    assert await snapshot(ledger) == before
    assert await ledger.check_aggregates() == []


async def test_non_billable_events_are_recorded_but_never_aggregated(backend: Backend) -> None:
    ledger = backend.ledger
    applied = await ledger.apply(
        [usage_event("refunded", billable=False), usage_event("served", texts=4)], []
    )
    assert applied == Applied(new=2, duplicates=0, dead=0)
    [row] = await ledger.hours(*EVERYTHING, None)
    assert (row.requests, row.texts) == (1, 4)
    assert await ledger.counts() == {"processed": 2, "billable": 1, "dead": 0}
    assert set(await ledger.processed_ids()) == {"refunded", "served"}
    await ledger.apply([usage_event("late-refund", DAY0 + HOUR, billable=False)], [])
    assert len(await ledger.hours(*EVERYTHING, None)) == 1
    assert await ledger.plan_exports(DAY0 + DAY) == [
        ExportIntent("id=1:8640000:texts:0", ACME, "acme", DAY0, "texts", 0, 4, None),
        ExportIntent("id=1:8640000:tokens:0", ACME, "acme", DAY0, "tokens", 0, 10, None),
    ]


async def test_dead_letters_are_kept_with_the_batch(backend: Backend) -> None:
    ledger = backend.ledger
    letters = [
        DeadLetter(b"\x00\xff not json", "not JSON", "usage.events #7"),
        DeadLetter(b'{"schema": 2}', "schema 2 is not 1", "outbox gw-1 #45"),
    ]
    applied = await ledger.apply([usage_event("r1")], letters)
    assert applied == Applied(new=1, duplicates=0, dead=2)
    assert await ledger.apply([], letters[:1]) == Applied(new=0, duplicates=0, dead=1)
    assert await ledger.counts() == {"processed": 1, "billable": 1, "dead": 3}
    if isinstance(ledger, MemoryLedger):
        stored = [(letter.data, letter.reason, letter.source) for letter in ledger.dead]
    else:
        assert backend.sql is not None
        stored = await backend.sql("SELECT data, reason, source FROM dead_letters ORDER BY id")
    assert stored == [(letter.data, letter.reason, letter.source) for letter in letters] + [
        (letters[0].data, letters[0].reason, letters[0].source)
    ]


async def test_an_empty_batch_is_a_no_op(backend: Backend) -> None:
    assert await backend.ledger.apply([], []) == Applied(new=0, duplicates=0, dead=0)
    assert await backend.ledger.counts() == {"processed": 0, "billable": 0, "dead": 0}


# usage ----------------------------------------------------------------------

USAGE_EVENTS = [
    usage_event("a1", DAY0 + 10, alias="mini", version="v1", texts=1, tokens=10),
    usage_event("a2", DAY0 + HOUR + 5, alias="large", version="v2", texts=2, tokens=20),
    usage_event("a3", DAY0 + DAY + 2 * HOUR, alias="mini", version="v1", texts=4, tokens=40),
    usage_event("a4", DAY0 + HOUR + 6, alias="mini", version="v1", tier="batch", texts=16),
    usage_event("b1", DAY0 + 30, tenant="beta", alias="mini", version="v1", texts=8, tokens=80),
]


@pytest.fixture
async def usage_ledger(backend: Backend) -> Ledger:
    await backend.ledger.apply(USAGE_EVENTS, [])
    return backend.ledger


async def test_usage_by_hour_sums_every_model_of_an_hour(usage_ledger: Ledger) -> None:
    rows = await usage_ledger.usage(UsageQuery(DAY0, DAY0 + 2 * DAY, "hour", None))
    assert rows == [
        UsageRow(ACME, "acme", DAY0, None, None, 1, 1, 10),
        UsageRow(ACME, "acme", DAY0 + HOUR, None, None, 2, 18, 30),
        UsageRow(ACME, "acme", DAY0 + DAY + 2 * HOUR, None, None, 1, 4, 40),
        UsageRow(BETA, "beta", DAY0, None, None, 1, 8, 80),
    ]


async def test_usage_by_day_starts_at_utc_midnight(usage_ledger: Ledger) -> None:
    rows = await usage_ledger.usage(UsageQuery(DAY0, DAY0 + 2 * DAY, "day", None))
    assert rows == [
        UsageRow(ACME, "acme", DAY0, None, None, 3, 19, 40),
        UsageRow(ACME, "acme", DAY0 + DAY, None, None, 1, 4, 40),
        UsageRow(BETA, "beta", DAY0, None, None, 1, 8, 80),
    ]


async def test_usage_by_model_covers_the_range_from_its_start_hour(usage_ledger: Ledger) -> None:
    rows = await usage_ledger.usage(UsageQuery(DAY0 + 1800, DAY0 + 2 * DAY, "model", None))
    assert rows == [
        UsageRow(ACME, "acme", DAY0, "large", "v2", 1, 2, 20),
        UsageRow(ACME, "acme", DAY0, "mini", "v1", 3, 21, 60),
        UsageRow(BETA, "beta", DAY0, "mini", "v1", 1, 8, 80),
    ]


async def test_usage_of_one_tenant(usage_ledger: Ledger) -> None:
    for group_by in ("hour", "day", "model"):
        rows = await usage_ledger.usage(UsageQuery(DAY0, DAY0 + DAY, group_by, BETA))
        assert [(row.tenant, row.texts) for row in rows] == [("beta", 8)], group_by
    assert await usage_ledger.usage(UsageQuery(DAY0, DAY0 + DAY, "hour", 999)) == []


@pytest.mark.parametrize(
    ("start", "end", "hours"),
    [
        (DAY0, DAY0 + HOUR, [DAY0]),  # end is exclusive
        (DAY0 + 1800, DAY0 + HOUR, [DAY0]),  # a start inside an hour takes that hour
        (DAY0 + HOUR - 1, DAY0 + HOUR + 0.5, [DAY0, DAY0 + HOUR]),  # hours starting before end
        (DAY0 + HOUR, DAY0 + HOUR, []),
        (DAY0 + 2 * HOUR, DAY0 + DAY + 2 * HOUR, []),
        (DAY0 + DAY, DAY0 + 2 * DAY, [DAY0 + DAY + 2 * HOUR]),
    ],
)
async def test_hours_and_usage_take_the_hours_starting_in_the_range(
    usage_ledger: Ledger, start: float, end: float, hours: list[int]
) -> None:
    rows = await usage_ledger.hours(start, end, None)
    assert sorted({row.hour for row in rows}) == hours
    usage = await usage_ledger.usage(UsageQuery(start, end, "hour", ACME))
    assert [row.period for row in usage] == hours


async def test_hours_returns_raw_aggregate_rows_of_a_tenant(usage_ledger: Ledger) -> None:
    assert await usage_ledger.hours(DAY0, DAY0 + DAY, ACME) == [
        HourlyUsage(ACME, "acme", "mini", "v1", "embeddings", "interactive", DAY0, 1, 1, 10),
        HourlyUsage(
            ACME, "acme", "large", "v2", "embeddings", "interactive", DAY0 + HOUR, 1, 2, 20
        ),
        HourlyUsage(ACME, "acme", "mini", "v1", "embeddings", "batch", DAY0 + HOUR, 1, 16, 10),
    ]


# exports --------------------------------------------------------------------


def intent(tenant: str, hour: int, meter: str, revision: int, quantity: int) -> ExportIntent:
    return ExportIntent(
        f"id={tenant_id_of(tenant)}:{hour}:{meter}:{revision}",
        tenant_id_of(tenant),
        tenant,
        hour,
        meter,  # type: ignore[arg-type]
        revision,
        quantity,
        None,
    )


async def test_plan_exports_reports_closed_hours_then_late_events_as_revisions(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    await ledger.apply(
        [
            usage_event("r1", DAY0 + 10, texts=1, tokens=10),
            usage_event("r2", DAY0 + 20, alias="large", texts=2, tokens=20),
            usage_event("r3", DAY0 + HOUR + 1, texts=100, tokens=100),  # the open hour
        ],
        [],
    )
    assert await ledger.plan_exports(DAY0 + HOUR - 0.5) == []  # DAY0 is not closed yet
    first = [intent("acme", DAY0, "texts", 0, 3), intent("acme", DAY0, "tokens", 0, 30)]
    assert await ledger.plan_exports(DAY0 + HOUR) == first
    assert await ledger.plan_exports(DAY0 + HOUR) == first  # unsent: offered again, not added

    await ledger.mark_sent(first[0].key, DAY0 + HOUR + 1)
    assert await ledger.plan_exports(DAY0 + HOUR) == first[1:]

    late = [
        usage_event("late", DAY0 + 30, texts=5, tokens=7),
        usage_event("beta", DAY0 + 40, tenant="beta", texts=1, tokens=0),
    ]
    await ledger.apply(late, [])
    await ledger.apply(late, [])  # a redelivery of the late ones adds no revision
    assert await ledger.plan_exports(DAY0 + HOUR) == [
        intent("acme", DAY0, "texts", 1, 5),
        intent("acme", DAY0, "tokens", 0, 30),
        intent("acme", DAY0, "tokens", 1, 7),
        intent("beta", DAY0, "texts", 0, 1),  # a meter at zero is never reported
    ]
    for unsent in await ledger.plan_exports(DAY0 + HOUR):
        await ledger.mark_sent(unsent.key, DAY0 + 2 * HOUR)
    assert await ledger.plan_exports(DAY0 + HOUR) == []
    assert await ledger.plan_exports(DAY0 + 2 * HOUR) == [
        intent("acme", DAY0 + HOUR, "texts", 0, 100),
        intent("acme", DAY0 + HOUR, "tokens", 0, 100),
    ]


async def test_marking_an_unknown_intent_fails_and_marking_twice_does_not(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    with pytest.raises(UnknownIntent):
        await ledger.mark_sent("acme:0:texts:0", 1.0)
    await ledger.apply([usage_event("r1")], [])
    [texts, _] = await ledger.plan_exports(DAY0 + HOUR)
    await ledger.mark_sent(texts.key, 1.0)
    await ledger.mark_sent(texts.key, 2.0)
    assert [unsent.key for unsent in await ledger.plan_exports(DAY0 + HOUR)] == [
        "id=1:8640000:tokens:0"
    ]


# tenant ids -----------------------------------------------------------------


async def test_a_tenant_created_with_a_deleted_ones_name_starts_with_no_usage(
    backend: Backend,
) -> None:
    ledger, again = backend.ledger, 9  # the registry's id of the second tenant named acme
    await ledger.apply([usage_event("old", DAY0 + 10, tenant_id=ACME, texts=5, tokens=50)], [])
    for group_by in ("hour", "day", "model"):
        assert await ledger.usage(UsageQuery(*EVERYTHING, group_by, again)) == [], group_by
    assert await ledger.hours(*EVERYTHING, again) == []
    await ledger.apply([usage_event("new", DAY0 + 20, tenant_id=again, texts=2, tokens=20)], [])
    mine = await ledger.usage(UsageQuery(*EVERYTHING, "day", again))
    assert mine == [UsageRow(again, "acme", DAY0, None, None, 1, 2, 20)]
    every = await ledger.usage(UsageQuery(*EVERYTHING, "day", None))
    assert [(row.tenant_id, row.tenant, row.texts) for row in every] == [
        (ACME, "acme", 5),
        (again, "acme", 2),
    ]
    assert [(i.key, i.quantity) for i in await ledger.plan_exports(DAY0 + HOUR)] == [
        ("id=1:8640000:texts:0", 5),
        ("id=1:8640000:tokens:0", 50),
        ("id=9:8640000:texts:0", 2),
        ("id=9:8640000:tokens:0", 20),
    ]
    assert await ledger.check_aggregates() == []


def legacy(request_id: str, at: float, tenant: str, texts: int) -> UsageEvent:
    """An event a gateway wrote before tenant ids, as the consumer decodes it."""
    event = decode(schema_1(usage_event(request_id, at, tenant=tenant, texts=texts, tokens=0)))
    assert event.tenant_id == LEGACY_TENANT_ID
    return event


async def test_legacy_usage_stays_apart_by_name_until_adopted_and_is_never_reported_twice(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    await ledger.apply(
        [
            legacy("l1", DAY0 + 10, "acme", 3),
            legacy("l2", DAY0 + 20, "acme", 4),
            legacy("l3", DAY0 + 30, "beta", 1),
            usage_event("n1", DAY0 + 40, tenant_id=ACME, texts=10, tokens=0),
        ],
        [],
    )
    by_day = UsageQuery(*EVERYTHING, "day", LEGACY_TENANT_ID)
    assert [(r.tenant, r.texts) for r in await ledger.usage(by_day)] == [("acme", 7), ("beta", 1)]
    ours = await ledger.usage(UsageQuery(*EVERYTHING, "day", ACME))
    assert [(r.tenant_id, r.texts) for r in ours] == [(ACME, 10)]
    reported = await ledger.plan_exports(DAY0 + HOUR)
    assert [(i.key, i.quantity) for i in reported] == [
        (f"{by_name('acme')}:8640000:texts:0", 7),  # by a hash of the name: no id
        (f"{by_name('beta')}:8640000:texts:0", 1),
        ("id=1:8640000:texts:0", 10),
    ]
    for intent in reported:
        await ledger.mark_sent(intent.key, DAY0 + HOUR)
    await ledger.apply([legacy("l4", DAY0 + 50, "acme", 1)], [])  # a late one

    assert await ledger.adopt_legacy("acme", ACME) == 3
    assert await ledger.hours(*EVERYTHING, ACME) == [
        HourlyUsage(ACME, "acme", "mini", "v1", "embeddings", "interactive", DAY0, 4, 18, 0)
    ]
    assert [r.tenant for r in await ledger.usage(by_day)] == ["beta"]
    # What the provider holds (7 by name, 10 by id) counts for the id: only the late 1 goes.
    assert [(i.key, i.quantity) for i in await ledger.plan_exports(DAY0 + HOUR)] == [
        ("id=1:8640000:texts:2", 1)
    ]
    assert await ledger.check_aggregates() == []
    assert await ledger.adopt_legacy("acme", ACME) == 0
    with pytest.raises(LedgerError, match="not a registry id"):
        await ledger.adopt_legacy("beta", LEGACY_TENANT_ID)


# consistency ----------------------------------------------------------------


def random_batches(seed: int) -> list[list[UsageEvent]]:
    """Batches drawn from a small id space, so that duplicates within a batch, across
    batches and whole redelivered batches are common."""
    rng = random.Random(seed)
    ids = [f"req-{i}" for i in range(120)]
    events = {
        request_id: usage_event(
            request_id,
            DAY0 + rng.uniform(0, 30 * HOUR),
            tenant=rng.choice(["acme", "beta", "gamma"]),
            alias=rng.choice(["mini", "large"]),
            version=rng.choice(["v1", "v2"]),
            endpoint=rng.choice(["embeddings", "rerank"]),
            tier=rng.choice(["interactive", "batch"]),
            texts=rng.randint(0, 64),
            tokens=rng.randint(0, 5000),
            billable=rng.random() < 0.8,
        )
        for request_id in ids
    }
    batches: list[list[UsageEvent]] = []
    for _ in range(40):
        if batches and rng.random() < 0.15:
            batches.append(rng.choice(batches))
        else:
            batches.append([events[rng.choice(ids)] for _ in range(rng.randint(0, 30))])
    return batches


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_random_batches_keep_aggregates_equal_to_the_reference(
    backend: Backend, seed: int
) -> None:
    ledger, reference = backend.ledger, MemoryLedger()
    for number, batch in enumerate(random_batches(seed)):
        assert await ledger.apply(batch, []) == await reference.apply(batch, [])
        if number % 10 == 9:
            closed = DAY0 + number * HOUR
            assert await ledger.plan_exports(closed) == await reference.plan_exports(closed)
    assert await ledger.check_aggregates() == []
    assert await snapshot(ledger) == await snapshot(reference)
    for group_by in ("hour", "day", "model"):
        query = UsageQuery(DAY0 + 5000, DAY0 + 20 * HOUR + 1, group_by, None)
        assert await ledger.usage(query) == await reference.usage(query)


async def corrupt(backend: Backend) -> None:
    """By hand, around the ledger: one sum wrong, one row gone, one row from nowhere."""
    if isinstance(backend.ledger, MemoryLedger):
        hourly = backend.ledger.hourly
        key = (ACME, "acme", "mini", "v1", "embeddings", "interactive", DAY0)
        requests, texts, tokens = hourly[key]
        hourly[key] = (requests, texts + 1, tokens)
        del hourly[(BETA, "beta", "mini", "v1", "embeddings", "interactive", DAY0)]
        hourly[(GHOST, "ghost", "mini", "v1", "embeddings", "batch", 0)] = (1, 1, 1)
        return
    assert backend.sql is not None
    await backend.sql("UPDATE hourly_usage SET texts = texts + 1 WHERE tenant_id = 1")
    await backend.sql("DELETE FROM hourly_usage WHERE tenant_id = 2")
    await backend.sql(
        "INSERT INTO hourly_usage (tenant_id, tenant, alias, version, endpoint, tier, hour,"
        " requests, texts, tokens) VALUES (7, 'ghost', 'mini', 'v1', 'embeddings', 'batch', 0,"
        " 1, 1, 1)"
    )


async def test_check_aggregates_finds_every_kind_of_corruption(backend: Backend) -> None:
    ledger = backend.ledger
    await ledger.apply([usage_event("a1"), usage_event("a2"), usage_event("b1", tenant="beta")], [])
    assert await ledger.check_aggregates() == []
    await corrupt(backend)
    problems = await ledger.check_aggregates()
    assert len(problems) == 3, problems
    acme, beta, ghost = sorted(problems)
    assert "(1, 'acme'," in acme and "(2, 3, 20)" in acme and "(2, 2, 20)" in acme
    assert "(2, 'beta'," in beta and "no aggregate row" in beta
    assert "(7, 'ghost'," in ghost and "no billable events" in ghost
