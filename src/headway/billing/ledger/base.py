"""What the consumer, the usage routes, invoices and the export need of a ledger.

Two implementations keep the same contract: ``sqlite.py`` (embedded mode) and
``postgres.py`` (shared mode), each with versioned schema migrations.

The invariant every implementation keeps: ``apply`` runs in **one transaction**:
each event's ``request_id`` is inserted into ``processed_requests`` (primary key;
a duplicate is dropped by ``ON CONFLICT DO NOTHING``), and only the rows that were
new are added to ``hourly_usage`` keyed by ``(tenant_id, tenant, alias, version,
endpoint, tier, hour)`` (billable events only). So a duplicate, a redelivery or a
replay from any point changes nothing, and every aggregate equals the sum of its
billable processed events (``check_aggregates`` proves it).

Usage belongs to a tenant id (the registry's, never reused): a tenant created with a
deleted tenant's name has an id of its own and so no usage. The name rides along for
display (one per id: the registry never renames a tenant); it tells apart only the
legacy rows (``LEGACY_TENANT_ID``), recorded before events carried an id, until
``adopt_legacy`` gives a name's legacy rows to a tenant id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from headway.metering.event import UsageEvent

GroupBy = Literal["hour", "day", "model"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Bytes that were not a valid usage event, and why; kept, never retried."""

    data: bytes
    reason: str
    source: str
    """Where it came from: the NATS subject and stream sequence, or the outbox row."""


@dataclass(frozen=True, slots=True)
class Applied:
    new: int
    """Events that were new: inserted and (if billable) aggregated."""
    duplicates: int
    dead: int


@dataclass(frozen=True, slots=True)
class UsageQuery:
    start: float
    """Unix seconds, inclusive (an hour boundary or any time: hours that start in it)."""
    end: float
    """Unix seconds, exclusive."""
    group_by: GroupBy
    tenant_id: int | None
    """None: every tenant (the operator's view)."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One row of ``GET /v1/usage``: ``period`` is the hour's or day's start (unix
    seconds, UTC) for ``hour``/``day``; for ``model`` it is the query's ``start``."""

    tenant_id: int
    tenant: str
    period: int
    alias: str | None
    """Set for ``group_by=model``, else None."""
    version: str | None
    requests: int
    texts: int
    tokens: int


@dataclass(frozen=True, slots=True)
class HourlyUsage:
    """One aggregate row, as invoices and the export read it."""

    tenant_id: int
    tenant: str
    alias: str
    version: str
    endpoint: str
    tier: str
    hour: int
    requests: int
    texts: int
    tokens: int


@dataclass(frozen=True, slots=True)
class ExportIntent:
    """One report to the external billing provider, recorded before it is sent.

    ``key`` is the idempotency key: ``id={tenant_id}:{hour}:{meter}:{revision}``, or
    ``name-{sha256(name)[:32]}:…`` for legacy rows (no tenant id); at most 100 ASCII
    characters whatever the name (``memory.intent_key``), within Stripe's limits.
    Intents recorded before tenant ids keep their ``{tenant}:…`` keys; one too long or
    not ASCII was refused by the provider, so it is rekeyed before it is sent. The
    first report of a closed hour is revision 0; events that arrive after it (late)
    make a further revision with only the difference, so the provider's sum is the
    ledger's. A revision is the number of intents its (tenant, hour, meter) had.
    """

    key: str
    tenant_id: int
    tenant: str
    hour: int
    meter: Literal["texts", "tokens"]
    revision: int
    quantity: int
    sent_at: float | None


class Ledger(Protocol):
    async def apply(self, events: Sequence[UsageEvent], dead: Sequence[DeadLetter]) -> Applied:
        """Write a batch in one transaction (see the module's invariant)."""
        ...

    async def usage(self, query: UsageQuery) -> list[UsageRow]:
        """Billable usage in ``[start, end)``, grouped, ordered by tenant id, name, period,
        alias."""
        ...

    async def hours(self, start: float, end: float, tenant_id: int | None) -> list[HourlyUsage]:
        """The aggregate rows of the hours a query of ``[start, end)`` covers: from the hour
        holding ``start`` to the last hour that starts before ``end``; ordered by hour,
        then by key."""
        ...

    async def plan_exports(self, closed_before: float) -> list[ExportIntent]:
        """In one transaction, record a new intent for every (tenant_id, tenant, hour,
        meter) of an hour that ended by ``closed_before`` (``hour + 3600 <= closed_before``)
        whose aggregate exceeds what its intents already report; return every intent not
        yet marked sent, oldest first.

        Only the hours from the watermark on, and the late hours below it that ``apply``
        added to since, are read; the watermark then moves to ``closed_before``'s hour
        (never back). An aggregate written past ``apply`` is not seen until its hour is
        late again (``migrations.py``, migration 3)."""
        ...

    async def mark_sent(self, key: str, at: float) -> None: ...

    async def adopt_legacy(self, tenant: str, tenant_id: int) -> int:
        """In one transaction, give every legacy row (``LEGACY_TENANT_ID``) of the name
        ``tenant`` (processed events, aggregates, export intents) to ``tenant_id``,
        adding its aggregates to the id's rows of the same key; the events moved. Export
        intents keep their keys: the provider counted them, and the id's next revisions
        count them too, so nothing is reported twice."""
        ...

    async def check_aggregates(self) -> list[str]:
        """Every aggregate row that is not the sum of its billable processed events,
        described; empty when the ledger is consistent."""
        ...

    async def counts(self) -> dict[str, int]:
        """``processed`` (all events), ``billable`` and ``dead``; for metrics and checkers."""
        ...

    async def processed_ids(self) -> dict[str, int]:
        """request id → how many rows hold it (always 1: the checker verifies it)."""
        ...

    async def close(self) -> None: ...
