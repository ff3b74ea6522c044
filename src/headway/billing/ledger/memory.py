"""The ledger in dicts: the reference fake for tests of the consumer, invoices, export.

It keeps the contract of ``base.py`` to the letter, and its pure functions are the
contract's arithmetic, which the SQL ledgers reuse so that the three cannot disagree:

- ``first_of_each``: within one batch the first event of a request id counts, the
  rest are duplicates (as they would be in a later batch);
- ``hourly_sums``: the new billable events, summed per aggregate key;
- ``new_intents``: for every closed (tenant, hour, meter), the difference between the
  hour's total and what its intents already report, as the next revision;
- ``intent_key``: an intent's idempotency key, within the provider's limits;
- ``late_hours`` / ``next_watermark``: what export planning must look at again, and
  how far it has planned;
- ``aggregate_problems``: what differs between aggregates recomputed from events and
  the stored ones, both ways.

Every method runs without awaiting, so on one event loop each call is atomic, as a
transaction would be.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, Literal

import msgspec

from headway.billing.ledger.base import (
    Applied,
    DeadLetter,
    ExportIntent,
    HourlyUsage,
    UsageQuery,
    UsageRow,
)
from headway.billing.ledger.errors import LedgerError, UnknownIntent
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent

Meter = Literal["texts", "tokens"]
METERS: tuple[Meter, ...] = ("texts", "tokens")

HourKey = tuple[int, str, str, str, str, str, int]
"""An aggregate row's key: tenant id, tenant, alias, version, endpoint, tier, hour."""
HOUR: Final = 6
"""The hour's place in a ``HourKey``."""
Group = tuple[int, str, int]
"""What is exported together: tenant id, tenant, hour."""
Sums = tuple[int, int, int]
"""requests, texts, tokens."""


def floor_hour(t: float) -> int:
    """The start of the hour holding ``t`` (unix seconds), as ``UsageEvent.hour``."""
    return int(t // 3600) * 3600


def hour_range(start: float, end: float) -> tuple[int, int]:
    """Integer bounds ``[low, high)`` of the hours a query covers: the hour holding
    ``start`` on, and every hour starting before ``end`` (``h < end`` ⇔ ``h < ceil(end)``
    for a whole ``h``)."""
    return floor_hour(start), math.ceil(end)


def first_of_each(events: Sequence[UsageEvent]) -> list[UsageEvent]:
    """The batch without repeated request ids, the first of each kept, in order."""
    seen: set[str] = set()
    unique: list[UsageEvent] = []
    for event in events:
        if event.request_id not in seen:
            seen.add(event.request_id)
            unique.append(event)
    return unique


def hour_key(event: UsageEvent) -> HourKey:
    return (
        event.tenant_id,
        event.tenant,
        event.alias,
        event.version,
        event.endpoint,
        event.tier,
        event.hour,
    )


def hourly_sums(new_events: Iterable[UsageEvent]) -> dict[HourKey, Sums]:
    """The billable events summed per aggregate key, keys in sorted order (SQL ledgers
    update rows in that order, so two writers never wait on each other in a cycle)."""
    sums: dict[HourKey, Sums] = {}
    for event in new_events:
        if event.billable:
            requests, texts, tokens = sums.get(hour_key(event), (0, 0, 0))
            sums[hour_key(event)] = (requests + 1, texts + event.texts, tokens + event.tokens)
    return dict(sorted(sums.items()))


MAX_KEY_CHARS: Final = 100
"""The longest key sent: Stripe's meter event ``identifier`` takes 100 characters (its
``Idempotency-Key`` 255), and both must be ASCII to travel in a header."""


def intent_key(tenant_id: int, tenant: str, hour: int, meter: str, revision: int) -> str:
    """``id={tenant_id}:{hour}:{meter}:{revision}`` for a tenant id. Legacy rows (no id)
    are named by a hash of the name, ``name-{sha256[:32]}:…``, never the name itself: a
    name may be long or not ASCII, and the key must stay short and ASCII whatever it
    is. At most ``MAX_KEY_CHARS`` (46 for the largest id, hour and revision)."""
    if tenant_id == LEGACY_TENANT_ID:
        owner = "name-" + hashlib.sha256(tenant.encode()).hexdigest()[:32]
    else:
        owner = f"id={tenant_id}"
    key = f"{owner}:{hour}:{meter}:{revision}"
    if len(key) > MAX_KEY_CHARS:  # only a revision past 10^40 could: a bug, not data
        raise LedgerError(f"export key {key[:60]}… is over {MAX_KEY_CHARS} characters")
    return key


def overlong(key: str) -> bool:
    """A key recorded before keys were bounded (a legacy intent keyed by a long or
    non-ASCII name): the provider refused it, so it was never counted and may be
    rekeyed (``intent_key``) before it is sent."""
    return len(key) > MAX_KEY_CHARS or not key.isascii()


def late_hours(sums: Iterable[HourKey], watermark: int) -> list[int]:
    """The hours of new aggregates that export planning already passed (below the
    watermark): it must plan them again, and report the difference as a revision."""
    return sorted({key[HOUR] for key in sums if key[HOUR] < watermark})


def next_watermark(watermark: int, closed_before: float) -> int:
    """Planned through every hour that ended by ``closed_before``; never moves back."""
    return max(watermark, floor_hour(closed_before))


def new_intents(
    totals: Mapping[Group, tuple[int, int]],
    reported: Mapping[tuple[int, str, int, str], tuple[int, int]],
) -> list[ExportIntent]:
    """The intents to record now.

    ``totals``: (tenant id, tenant, closed hour) → (texts, tokens) summed over its
    aggregate rows. ``reported``: (tenant id, tenant, hour, meter) → (sum of quantities,
    number of intents). A meter whose total exceeds what is reported gets the
    difference, as the next revision of its key's owner: the number of intents of its
    tenant id at that hour and meter (by name for legacy rows), so that a key is never
    made twice, also after ``adopt_legacy`` gave an id intents keyed by name. The
    provider's sum of revisions is then the ledger's total.
    """
    by_id: dict[tuple[int, int, str], int] = {}
    by_name: dict[tuple[str, int, str], int] = {}
    for (tenant_id, tenant, hour, meter), (_, count) in reported.items():
        by_id[(tenant_id, hour, meter)] = by_id.get((tenant_id, hour, meter), 0) + count
        by_name[(tenant, hour, meter)] = by_name.get((tenant, hour, meter), 0) + count
    intents: list[ExportIntent] = []
    for (tenant_id, tenant, hour), meter_totals in sorted(
        totals.items(), key=lambda item: (item[0][2], item[0][0], item[0][1])
    ):
        for meter, total in zip(METERS, meter_totals, strict=True):
            quantity, _ = reported.get((tenant_id, tenant, hour, meter), (0, 0))
            if total > quantity:
                if tenant_id == LEGACY_TENANT_ID:
                    revision = by_name.get((tenant, hour, meter), 0)
                else:
                    revision = by_id.get((tenant_id, hour, meter), 0)
                intents.append(
                    ExportIntent(
                        key=intent_key(tenant_id, tenant, hour, meter, revision),
                        tenant_id=tenant_id,
                        tenant=tenant,
                        hour=hour,
                        meter=meter,
                        revision=revision,
                        quantity=total - quantity,
                        sent_at=None,
                    )
                )
    return intents


def bounded_key(intent: ExportIntent) -> str:
    """The key an ``overlong`` one becomes. Only legacy intents were keyed by name, so it
    is the legacy form (by a hash of the name) whoever adopted the intent since: its
    revision was counted by name, so no other intent has that key."""
    return intent_key(LEGACY_TENANT_ID, intent.tenant, intent.hour, intent.meter, intent.revision)


def unsent_order(intent: ExportIntent) -> tuple[int, int, str, str, int, str]:
    return (intent.hour, intent.tenant_id, intent.tenant, intent.meter, intent.revision, intent.key)


def keyed_sums(rows: Iterable[Sequence[Any]]) -> dict[HourKey, Sums]:
    """Rows of (tenant id, tenant, alias, version, endpoint, tier, hour, requests, texts,
    tokens)."""
    return {(r[0], r[1], r[2], r[3], r[4], r[5], r[6]): (r[7], r[8], r[9]) for r in rows}


def aggregate_problems(
    expected: Mapping[HourKey, Sums], stored: Mapping[HourKey, Sums]
) -> list[str]:
    """Each key whose stored sums are not those recomputed from the billable events,
    including keys missing from either side; sorted by key."""
    problems: list[str] = []
    for key in sorted(expected.keys() | stored.keys()):
        want, have = expected.get(key), stored.get(key)
        if want == have:
            continue
        if have is None:
            problems.append(f"{key}: no aggregate row, events sum to {want}")
        elif want is None:
            problems.append(f"{key}: aggregate row {have} has no billable events")
        else:
            problems.append(f"{key}: aggregate row {have}, events sum to {want}")
    return problems


def check_adoption(tenant_id: int) -> None:
    """Legacy rows go to a registry id (1 and up), never to the legacy marker itself."""
    if not 0 < tenant_id < 2**63:
        raise LedgerError(f"tenant id {tenant_id} is not a registry id (1 and up)")


def usage_rows(rows: Iterable[HourlyUsage], query: UsageQuery) -> list[UsageRow]:
    """``GET /v1/usage`` from aggregate rows already restricted to the query's hours."""
    groups: dict[tuple[int, str, int, str | None, str | None], list[int]] = {}
    for row in rows:
        group: tuple[int, str, int, str | None, str | None]
        if query.group_by == "hour":
            group = (row.tenant_id, row.tenant, row.hour, None, None)
        elif query.group_by == "day":
            group = (row.tenant_id, row.tenant, row.hour - row.hour % 86400, None, None)
        else:
            group = (row.tenant_id, row.tenant, floor_hour(query.start), row.alias, row.version)
        sums = groups.setdefault(group, [0, 0, 0])
        sums[0] += row.requests
        sums[1] += row.texts
        sums[2] += row.tokens
    ordered = sorted(groups.items(), key=lambda item: _usage_order(*item[0]))
    return [UsageRow(*group, *sums) for group, sums in ordered]


def _usage_order(
    tenant_id: int, tenant: str, period: int, alias: str | None, version: str | None
) -> tuple[int, str, int, str, str]:
    return (tenant_id, tenant, period, alias or "", version or "")


class MemoryLedger:
    """The whole ``Ledger`` protocol in dicts; nothing survives ``close``."""

    def __init__(self) -> None:
        self.processed: dict[str, UsageEvent] = {}
        self.hourly: dict[HourKey, Sums] = {}
        """Public so a test can corrupt it and watch ``check_aggregates`` notice."""
        self.dead: list[DeadLetter] = []
        self.intents: dict[str, ExportIntent] = {}
        self.watermark = 0
        """Every hour below it was planned (``plan_exports``)."""
        self.late: set[int] = set()
        """Hours below the watermark that ``apply`` added to since."""

    async def apply(self, events: Sequence[UsageEvent], dead: Sequence[DeadLetter]) -> Applied:
        new = [event for event in first_of_each(events) if event.request_id not in self.processed]
        for event in new:
            self.processed[event.request_id] = event
        sums = hourly_sums(new)
        for key, (requests, texts, tokens) in sums.items():
            old = self.hourly.get(key, (0, 0, 0))
            self.hourly[key] = (old[0] + requests, old[1] + texts, old[2] + tokens)
        self.late.update(late_hours(sums, self.watermark))
        self.dead.extend(dead)
        return Applied(new=len(new), duplicates=len(events) - len(new), dead=len(dead))

    async def usage(self, query: UsageQuery) -> list[UsageRow]:
        return usage_rows(await self.hours(query.start, query.end, query.tenant_id), query)

    async def hours(self, start: float, end: float, tenant_id: int | None) -> list[HourlyUsage]:
        low, high = hour_range(start, end)
        return [
            HourlyUsage(*key, *sums)
            for key, sums in sorted(self.hourly.items(), key=lambda item: (item[0][HOUR], item[0]))
            if low <= key[HOUR] < high and tenant_id in (None, key[0])
        ]

    async def plan_exports(self, closed_before: float) -> list[ExportIntent]:
        closed = floor_hour(closed_before)

        def planned(hour: int) -> bool:
            return self.watermark <= hour < closed or hour in self.late

        totals: dict[Group, tuple[int, int]] = {}
        for (tenant_id, tenant, _, _, _, _, hour), (_, texts, tokens) in self.hourly.items():
            if planned(hour):
                old = totals.get((tenant_id, tenant, hour), (0, 0))
                totals[(tenant_id, tenant, hour)] = (old[0] + texts, old[1] + tokens)
        reported: dict[tuple[int, str, int, str], tuple[int, int]] = {}
        for intent in self.intents.values():
            if planned(intent.hour):
                group = (intent.tenant_id, intent.tenant, intent.hour, intent.meter)
                quantity, count = reported.get(group, (0, 0))
                reported[group] = (quantity + intent.quantity, count + 1)
        for intent in new_intents(totals, reported):
            self.intents[intent.key] = intent
        self.watermark = next_watermark(self.watermark, closed_before)
        self.late.clear()
        for intent in [i for i in self.intents.values() if i.sent_at is None and overlong(i.key)]:
            del self.intents[intent.key]
            rekeyed = replace(intent, key=bounded_key(intent))
            self.intents[rekeyed.key] = rekeyed
        unsent = [intent for intent in self.intents.values() if intent.sent_at is None]
        return sorted(unsent, key=unsent_order)

    async def mark_sent(self, key: str, at: float) -> None:
        intent = self.intents.get(key)
        if intent is None:
            raise UnknownIntent(f"no export intent has key {key!r}")
        if intent.sent_at is None:
            self.intents[key] = replace(intent, sent_at=at)

    async def adopt_legacy(self, tenant: str, tenant_id: int) -> int:
        check_adoption(tenant_id)
        moved = 0
        for request_id, event in self.processed.items():
            if (event.tenant_id, event.tenant) == (LEGACY_TENANT_ID, tenant):
                self.processed[request_id] = msgspec.structs.replace(event, tenant_id=tenant_id)
                moved += 1
        for key in sorted(k for k in self.hourly if k[:2] == (LEGACY_TENANT_ID, tenant)):
            legacy = self.hourly.pop(key)
            adopted: HourKey = (tenant_id, *key[1:])
            old = self.hourly.get(adopted, (0, 0, 0))
            self.hourly[adopted] = (old[0] + legacy[0], old[1] + legacy[1], old[2] + legacy[2])
        for name, intent in self.intents.items():
            if (intent.tenant_id, intent.tenant) == (LEGACY_TENANT_ID, tenant):
                self.intents[name] = replace(intent, tenant_id=tenant_id)
        adopted_hours = [k for k in self.hourly if k[:2] == (tenant_id, tenant)]
        self.late.update(late_hours(adopted_hours, self.watermark))
        return moved

    async def check_aggregates(self) -> list[str]:
        return aggregate_problems(hourly_sums(self.processed.values()), self.hourly)

    async def counts(self) -> dict[str, int]:
        billable = sum(1 for event in self.processed.values() if event.billable)
        return {"processed": len(self.processed), "billable": billable, "dead": len(self.dead)}

    async def processed_ids(self) -> dict[str, int]:
        return dict.fromkeys(self.processed, 1)

    async def close(self) -> None:
        pass
