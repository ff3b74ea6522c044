"""Report each closed hour's usage to the billing provider (Stripe meter events), once.

The ledger plans (``plan_exports``): an intent per (tenant id, closed hour, meter) whose
total exceeds what earlier intents report, the difference as its quantity, under a key of at
most 100 ASCII characters (``ExportIntent``). This module delivers: each unsent intent goes
under its key (as the ``Idempotency-Key`` and the event's ``identifier``) and is marked sent
only once the provider accepted it. An intent never changes, so one whose send failed or
whose answer was lost goes again with the same key and quantity and is counted once: the
provider's sum per (tenant, meter) is the ledger's.

The customer is the registry's mapping of the tenant id (``Customers``), so a tenant created
with a deleted one's name has its own. An unmapped tenant's intents wait for a later run,
logged once per tenant and counted (``unmapped``); other tenants go on. With
``billing.export_unmapped = "tenant_name"`` they go under the tenant's name instead.

An intent the provider already had (a replayed answer, or its identifier exists) is marked
sent. One refused with a 4xx that retrying cannot cure stays unsent, logged as an error
(``rejected``), and is tried every run until its cause is fixed. A provider unreachable or
failing (5xx, 429, 409, timeouts) through the client's retries leaves it unsent (``failed``);
after ``give_up_after`` of those in a row the run stops (``deferred``), so a provider that is
down costs one client's retry budget a few times, not once per intent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import aiohttp

from headway.billing.ledger.base import ExportIntent, Ledger
from headway.metering.event import LEGACY_TENANT_ID

log = logging.getLogger(__name__)

METER_EVENTS_PATH = "/v1/billing/meter_events"
RETRY_STATUSES = frozenset({409, 429})
"""Besides every 5xx: Stripe's lock conflict and rate limit, both worth another try."""


class ProviderUnavailable(Exception):
    """The billing provider could not be reached, or kept failing, within the retry budget."""


@dataclass(frozen=True, slots=True)
class Accepted:
    already_recorded: bool
    """The provider had this event before: a replayed answer, or its identifier exists."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A 4xx that another try would not change (bad key, bad parameters, …)."""

    status: int
    error_type: str
    message: str


class MeterClient(Protocol):
    async def send(self, intent: ExportIntent, customer: str) -> Accepted | Rejected:
        """Report ``intent`` for ``customer`` under its key; ``ProviderUnavailable`` when
        no try got an answer that settles it."""
        ...


@dataclass(frozen=True, slots=True)
class Customers:
    """Whom the provider bills for a tenant: the registry's mapping, read once a run."""

    ids: Mapping[int, str]
    """Tenant id → customer id (``RegistryStore.billing_customers``)."""
    fall_back_to_name: bool = False
    """An unmapped tenant (or a legacy row, which has no id) goes under its name."""

    def of(self, intent: ExportIntent) -> str | None:
        customer = self.ids.get(intent.tenant_id) if intent.tenant_id != LEGACY_TENANT_ID else None
        if customer is None and self.fall_back_to_name:
            return intent.tenant
        return customer


@dataclass(frozen=True, slots=True)
class ExportReport:
    planned: int
    """Unsent intents the ledger returned."""
    sent: int
    already_sent: int
    failed: int
    rejected: int
    deferred: int
    """Not tried: the run stopped after ``give_up_after`` failures in a row."""
    problems: tuple[str, ...]
    """One line per failed or rejected intent, and per tenant with no customer."""
    unmapped: int = 0
    """Not sent: the tenant has no billing customer in the registry."""


async def export_closed_hours(
    ledger: Ledger,
    client: MeterClient,
    now: float,
    grace_s: float,
    give_up_after: int = 3,
    *,
    customers: Customers,
) -> ExportReport:
    """Send every unsent intent for the hours that ended at least ``grace_s`` before
    ``now`` (late events after that make a further revision), oldest first, each to
    its tenant's customer; a tenant with none waits (``unmapped``)."""
    intents = await ledger.plan_exports(closed_before=now - grace_s)
    sent = already = failed = rejected = unmapped = failures_in_a_row = 0
    problems: list[str] = []
    refused: set[tuple[int, str]] = set()
    for index, intent in enumerate(intents):
        if failures_in_a_row >= give_up_after:
            log.warning(
                "billing export stopped after %d failures in a row; %d intents wait for "
                "the next run",
                failures_in_a_row,
                len(intents) - index,
            )
            break
        customer = customers.of(intent)
        if customer is None:
            unmapped += 1
            if (intent.tenant_id, intent.tenant) not in refused:
                refused.add((intent.tenant_id, intent.tenant))
                problem = _unmapped(intent)
                problems.append(problem)
                log.error("billing export refused: %s", problem)
            continue
        try:
            result = await client.send(intent, customer)
        except ProviderUnavailable as exc:
            failed += 1
            failures_in_a_row += 1
            problems.append(f"{intent.key}: {exc}")
            log.warning("billing export of %s failed; it stays unsent: %s", intent.key, exc)
            continue
        failures_in_a_row = 0
        if isinstance(result, Rejected):
            rejected += 1
            problem = f"{intent.key}: HTTP {result.status} {result.error_type}: {result.message}"
            problems.append(problem)
            log.error("billing provider rejected %s; it stays unsent until fixed", problem)
            continue
        await ledger.mark_sent(intent.key, now)
        if result.already_recorded:
            already += 1
        else:
            sent += 1
    tried = sent + already + failed + rejected + unmapped
    return ExportReport(
        len(intents),
        sent,
        already,
        failed,
        rejected,
        len(intents) - tried,
        tuple(problems),
        unmapped,
    )


def _unmapped(intent: ExportIntent) -> str:
    """Why a tenant's intents wait, and what to do; the tenant by id (the name only as
    far as it is short: it is the operator's, yet logs are no place for long input)."""
    if intent.tenant_id == LEGACY_TENANT_ID:
        return (
            f"usage recorded by name {intent.tenant[:64]!r} before tenant ids has no billing"
            " customer: give it to a tenant (headway billing adopt-legacy) or set"
            ' billing.export_unmapped = "tenant_name"; its intents wait'
        )
    return (
        f"tenant id {intent.tenant_id} ({intent.tenant[:64]!r}) has no billing customer:"
        f" headway tenants set {intent.tenant[:64]} --billing-customer CUSTOMER_ID; its"
        " intents wait"
    )


def meter_event_form(intent: ExportIntent, customer: str) -> dict[str, str]:
    """The intent as Stripe's ``POST /v1/billing/meter_events`` form for ``customer``;
    the event's time is the start of its hour."""
    return {
        "event_name": f"headway_{intent.meter}",
        "payload[stripe_customer_id]": customer,
        "payload[value]": str(intent.quantity),
        "identifier": intent.key,
        "timestamp": str(intent.hour),
    }


class HttpMeterClient:
    """Stripe's meter events API over aiohttp.

    One ``send`` makes up to ``attempts`` tries, each bounded by ``timeout_s``, sleeping
    ``backoff_s``, doubled each time up to ``max_backoff_s``, between them; so it returns
    or raises within ``attempts × timeout_s + Σ backoff``. Retrying is safe because every
    try carries the intent's key: the provider counts the event once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        session: aiohttp.ClientSession | None = None,
        *,
        attempts: int = 4,
        timeout_s: float = 10.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 4.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._url = base_url.rstrip("/") + METER_EVENTS_PATH
        self._api_key = api_key
        self._session = session
        self._owns_session = session is None
        self._attempts = attempts
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._sleep = sleep

    async def send(self, intent: ExportIntent, customer: str) -> Accepted | Rejected:
        headers = {"Authorization": f"Bearer {self._api_key}", "Idempotency-Key": intent.key}
        form = meter_event_form(intent, customer)
        last = "no try was made"
        for attempt in range(self._attempts):
            if attempt:
                await self._sleep(min(self._backoff_s * 2 ** (attempt - 1), self._max_backoff_s))
            try:
                async with self._client().post(
                    self._url, data=form, headers=headers, timeout=self._timeout
                ) as response:
                    body = await response.read()
                    status = response.status
                    replayed = response.headers.get("Idempotent-Replayed") == "true"
                    should_retry = response.headers.get("Stripe-Should-Retry")
            except TimeoutError:
                last = f"timed out after {self._timeout.total} s"
                continue
            except aiohttp.ClientError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if 200 <= status < 300:
                return Accepted(already_recorded=replayed)
            error = _error_of(body)
            if status == 400 and (error.get("code"), error.get("param")) == (
                "resource_already_exists",
                "identifier",
            ):
                return Accepted(already_recorded=True)
            message = str(error.get("message", body[:200].decode(errors="replace")))
            if _retryable(status, should_retry):
                last = f"HTTP {status}: {message}"
                continue
            return Rejected(status, str(error.get("type", "unknown")), message)
        raise ProviderUnavailable(f"POST {self._url}: {self._attempts} tries; last: {last}")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> HttpMeterClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _retryable(status: int, should_retry: str | None) -> bool:
    """Stripe's ``Stripe-Should-Retry`` header decides when present; else 5xx, 409, 429."""
    if should_retry in ("true", "false"):
        return should_retry == "true"
    return status >= 500 or status in RETRY_STATUSES


def _error_of(body: bytes) -> dict[str, object]:
    """Stripe's ``{"error": {...}}``; empty when the body is something else."""
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    error = document.get("error") if isinstance(document, dict) else None
    return error if isinstance(error, dict) else {}
