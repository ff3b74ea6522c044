"""The export against the fake provider: each closed hour once; retries never double."""

from __future__ import annotations

import asyncio
import calendar
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace

import aiohttp
import msgspec
import pytest

from headway.billing.export import (
    Customers,
    ExportReport,
    HttpMeterClient,
    ProviderUnavailable,
    Rejected,
    export_closed_hours,
    meter_event_form,
)
from headway.billing.ledger.memory import MemoryLedger
from headway.metering.event import UsageEvent
from headway_tools.testing.billing_provider import METER_EVENTS_PATH, BillingProvider

HOUR = 3600
H0 = calendar.timegm((2026, 11, 2, 0, 0, 0))
H1, H2, H3 = H0 + HOUR, H0 + 2 * HOUR, H0 + 3 * HOUR
GRACE = 120.0


def event(
    request_id: str, at: float, *, tenant: str = "acme", texts: int = 1, tokens: int = 10
) -> UsageEvent:
    return UsageEvent(
        request_id=request_id,
        tenant_id={"acme": 1, "beta": 2}[tenant],
        tenant=tenant,
        key_id="k1",
        endpoint="embeddings",
        alias="mini",
        version="v1",
        tier="interactive",
        texts=texts,
        tokens=tokens,
        outcome="served",
        billable=True,
        queue_s=0.0,
        inference_s=0.0,
        total_s=0.0,
        gateway_id="gw-1",
        at=at,
    )


EVENTS = [
    event("r1", H0 + 10, texts=2, tokens=30),
    event("r2", H0 + 3000, texts=5, tokens=70),
    event("r3", H1 + 5, texts=1, tokens=11),
    event("r4", H0 + 99, tenant="beta", texts=4, tokens=400),
    event("r5", H2 + 10, texts=9, tokens=900),  # in the open hour
]
NOW = H2 + GRACE + 60
"""H0 and H1 are closed and past their grace; H2 is open."""


def expected_sums(events: Iterable[UsageEvent], closed_before: float) -> dict[tuple[str, str], int]:
    """What the provider should hold: the events of closed hours, summed per meter."""
    sums: Counter[tuple[str, str]] = Counter()
    for usage in events:
        if usage.hour + HOUR <= closed_before:
            sums[(usage.tenant, "headway_texts")] += usage.texts
            sums[(usage.tenant, "headway_tokens")] += usage.tokens
    return dict(sums)


@pytest.fixture
async def provider() -> AsyncIterator[BillingProvider]:
    async with BillingProvider() as running:
        yield running


def meter_client(provider: BillingProvider, api_key: str | None = None) -> HttpMeterClient:
    return HttpMeterClient(
        provider.base_url, api_key or provider.api_key, timeout_s=5.0, backoff_s=0.001
    )


@pytest.fixture
async def client(provider: BillingProvider) -> AsyncIterator[HttpMeterClient]:
    async with meter_client(provider) as opened:
        yield opened


async def ledger_with(events: list[UsageEvent]) -> MemoryLedger:
    ledger = MemoryLedger()
    await ledger.apply(events, [])
    return ledger


CUSTOMERS = Customers({1: "cus_acme", 2: "cus_beta"})
"""The registry's mapping in these tests: tenant id → customer at the provider."""
NAMES = {"cus_acme": "acme", "cus_beta": "beta"}


async def export(
    ledger: MemoryLedger,
    client: HttpMeterClient,
    now: float,
    customers: Customers = CUSTOMERS,
) -> ExportReport:
    return await export_closed_hours(ledger, client, now, GRACE, customers=customers)


def sums_by_tenant(provider: BillingProvider) -> dict[tuple[str, str], int]:
    """The provider's sums, its customers named by the tenants they stand for."""
    return {(NAMES[customer], meter): value for (customer, meter), value in provider.sums.items()}


async def test_each_closed_hour_is_reported_once_per_meter_and_the_open_hour_not(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    report = await export(ledger, client, NOW)
    hours = {(usage.tenant, usage.hour) for usage in EVENTS if usage.hour + HOUR <= NOW - GRACE}
    assert report.planned == report.sent == 2 * len(hours)
    assert (report.failed, report.rejected, report.deferred, report.problems) == (0, 0, 0, ())
    reported = Counter((NAMES[e.customer], e.timestamp, e.event_name) for e in provider.events)
    assert reported == Counter(
        (tenant, hour, meter)
        for tenant, hour in hours
        for meter in ("headway_texts", "headway_tokens")
    )
    assert H2 not in {e.timestamp for e in provider.events}
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)
    assert all(e.identifier == e.idempotency_key for e in provider.events)
    assert {intent.sent_at for intent in ledger.intents.values()} == {NOW}


async def test_an_hour_is_not_reported_before_its_grace_has_passed(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with([event("r1", H0 + 10)])
    early = await export(ledger, client, H1 + GRACE - 1)
    assert (early.planned, provider.attempts) == (0, [])
    assert (await export(ledger, client, H1 + GRACE)).sent == 2
    assert {e.timestamp for e in provider.events} == {H0}


async def test_a_rerun_reports_nothing_new(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    first = await export(ledger, client, NOW)
    attempts = len(provider.attempts)
    again = await export(ledger, client, NOW + 600)
    assert first.sent > 0 and again == ExportReport(0, 0, 0, 0, 0, 0, ())
    assert len(provider.attempts) == attempts
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)


async def test_a_late_event_is_a_revision_with_only_the_difference(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    await export(ledger, client, NOW)
    late = event("late", H0 + 1800, texts=3, tokens=40)
    await ledger.apply([late], [])
    report = await export(ledger, client, NOW + 600)
    assert report.sent == 2
    revisions = provider.events[-2:]
    assert [(e.identifier, e.value) for e in revisions] == [
        (f"id=1:{H0}:texts:1", late.texts),
        (f"id=1:{H0}:tokens:1", late.tokens),
    ]
    assert sums_by_tenant(provider) == expected_sums([*EVENTS, late], NOW - GRACE)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_failed_tries_are_retried_with_the_same_key_and_counted_once(
    provider: BillingProvider, client: HttpMeterClient, status: int
) -> None:
    ledger = await ledger_with(EVENTS)
    provider.fail_next(2, status=status)
    report = await export(ledger, client, NOW)
    assert report.sent == report.planned and report.failed == 0
    first = f"id=1:{H0}:texts:0"
    assert provider.attempts[:4] == [first, first, first, f"id=1:{H0}:tokens:0"]
    assert len(provider.events) == report.planned
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)


async def test_a_lost_answer_is_retried_with_the_same_key_and_counted_once(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    provider.lose_next_response(1)
    report = await export(ledger, client, NOW)
    first = f"id=1:{H0}:texts:0"
    assert provider.attempts[:3] == [first, first, f"id=1:{H0}:tokens:0"]
    assert (report.already_sent, report.sent) == (1, report.planned - 1)
    assert Counter(e.identifier for e in provider.events)[first] == 1
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)
    assert all(intent.sent_at is not None for intent in ledger.intents.values())


async def test_while_the_provider_is_down_intents_wait_and_a_later_run_sends_them(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    await provider.stop()
    down = await export(ledger, client, NOW)
    assert (down.sent, down.failed, down.deferred) == (0, 3, down.planned - 3)
    assert len(down.problems) == 3 and "ProviderUnavailable" not in down.problems[0]
    assert all(intent.sent_at is None for intent in ledger.intents.values())
    planned = {key: intent.quantity for key, intent in ledger.intents.items()}
    await provider.start()
    up = await export(ledger, client, NOW + 600)
    assert up.sent == up.planned == len(planned)
    assert {e.identifier: e.value for e in provider.events} == planned
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)


@pytest.mark.parametrize("keys_expired", [False, True])
async def test_an_event_sent_but_never_marked_counts_as_already_sent(
    provider: BillingProvider, client: HttpMeterClient, keys_expired: bool
) -> None:
    """The exporter crashed between the provider's answer and ``mark_sent``; the provider
    recognises the resend by its key, or by its identifier once the key has expired."""
    ledger = await ledger_with(EVENTS)
    intents = await ledger.plan_exports(closed_before=NOW - GRACE)
    await client.send(intents[0], "cus_acme")
    if keys_expired:
        provider.expire_idempotency_keys()
    report = await export(ledger, client, NOW)
    assert (report.already_sent, report.sent) == (1, len(intents) - 1)
    assert len(provider.events) == len(intents)
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)
    assert ledger.intents[intents[0].key].sent_at == NOW


async def test_a_rejection_is_logged_counted_and_left_for_the_next_run(
    provider: BillingProvider, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = await ledger_with(EVENTS)
    async with meter_client(provider, api_key="sk_test_wrong") as wrong:
        with caplog.at_level(logging.ERROR, logger="headway.billing.export"):
            report = await export(ledger, wrong, NOW)
    assert (report.rejected, report.sent, report.failed) == (report.planned, 0, 0)
    assert provider.attempts == [intent.key for intent in ledger.intents.values()]  # no retry
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == report.planned and f"id=1:{H0}:texts:0: HTTP 401" in errors[0]
    assert provider.sums == {}
    assert all(intent.sent_at is None for intent in ledger.intents.values())
    async with meter_client(provider) as right:
        assert (await export(ledger, right, NOW + 600)).sent == report.planned
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)


async def test_a_key_reused_with_another_quantity_is_refused_not_counted_again(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    intents = await ledger.plan_exports(closed_before=NOW - GRACE)
    tampered = replace(intents[0], quantity=intents[0].quantity + 1)
    await client.send(tampered, "cus_acme")
    report = await export(ledger, client, NOW)
    assert (report.rejected, report.sent) == (1, len(intents) - 1)
    assert "idempotency_error" in report.problems[0] and intents[0].key in report.problems[0]
    assert ledger.intents[intents[0].key].sent_at is None
    assert Counter(e.identifier for e in provider.events)[intents[0].key] == 1


async def test_one_send_gives_up_after_its_tries(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    intent = (await ledger.plan_exports(closed_before=NOW - GRACE))[0]
    provider.fail_next(10)
    with pytest.raises(ProviderUnavailable, match="4 tries; last: HTTP 500"):
        await client.send(intent, "cus_acme")
    assert provider.attempts == [intent.key] * 4 and provider.events == []


async def test_a_provider_that_never_answers_times_out() -> None:
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client gives up and closes

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ledger = await ledger_with(EVENTS)
    intent = (await ledger.plan_exports(closed_before=NOW - GRACE))[0]
    try:
        async with HttpMeterClient(
            f"http://127.0.0.1:{port}", "sk", attempts=2, timeout_s=0.05, backoff_s=0.001
        ) as silent:
            with pytest.raises(ProviderUnavailable, match="2 tries; last: timed out"):
                await silent.send(intent, "cus_acme")
    finally:
        server.close()
        for writer in held:
            writer.close()
            await writer.wait_closed()
        await server.wait_closed()
    assert len(held) == 2  # each try opened a connection of its own


async def test_the_fake_provider_keeps_stripes_rules(provider: BillingProvider) -> None:
    ledger = await ledger_with(EVENTS)
    intent = (await ledger.plan_exports(closed_before=NOW - GRACE))[0]
    form = meter_event_form(intent, "cus_acme")
    url = provider.base_url + METER_EVENTS_PATH
    bearer = {"Authorization": f"Bearer {provider.api_key}"}

    async def post(headers: dict[str, str], data: dict[str, str]) -> tuple[int, object, str]:
        async with session.post(url, data=data, headers=headers) as response:
            body = await response.json()
            return response.status, body, response.headers.get("Idempotent-Replayed", "")

    async with aiohttp.ClientSession() as session:
        status, body, _ = await post({"Idempotency-Key": intent.key}, form)
        assert status == 401 and provider.events == []
        keyed = {**bearer, "Idempotency-Key": intent.key}
        first = await post(keyed, form)
        replay = await post(keyed, form)
        assert first[0] == 200 and replay == (200, first[1], "true")
        status, body, _ = await post(keyed, {**form, "payload[value]": "999"})
        assert status == 400 and body["error"]["type"] == "idempotency_error"  # type: ignore[index]
        status, body, _ = await post({**bearer, "Idempotency-Key": "another"}, form)
        assert status == 400 and body["error"]["param"] == "identifier"  # type: ignore[index]
    assert [e.identifier for e in provider.events] == [intent.key]
    assert provider.sums == {("cus_acme", f"headway_{intent.meter}"): intent.quantity}


@pytest.mark.parametrize("name", ["n" * 300, "Ünïcødé 客户 🚀 " * 12])
async def test_any_tenant_name_is_exported_under_keys_the_provider_takes(
    provider: BillingProvider, client: HttpMeterClient, name: str
) -> None:
    """Usage recorded by name (legacy rows, no tenant id) once made keys of the name:
    over ~75 characters Stripe refused them, and a non-ASCII one cannot be a header."""
    legacy = msgspec.structs.replace(
        event("long", H0 + 10, texts=3, tokens=30), tenant_id=0, tenant=name
    )
    ledger = await ledger_with([legacy])
    report = await export(ledger, client, NOW, Customers({}, fall_back_to_name=True))
    assert (report.sent, report.rejected, report.failed) == (2, 0, 0), report.problems
    assert all(len(key or "") <= 100 and (key or "").isascii() for key in provider.attempts)
    assert {e.value for e in provider.events} == {3, 30}


async def test_the_fake_provider_refuses_keys_over_stripes_limits(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS[:1])
    [intent, _] = await ledger.plan_exports(NOW - GRACE)
    too_long = replace(intent, key="k" * 101)
    result = await client.send(too_long, "cus_acme")
    assert result == Rejected(400, "invalid_request_error", "At most 100 characters")
    assert provider.events == []


async def test_a_tenant_with_no_customer_waits_and_the_others_go(
    provider: BillingProvider, client: HttpMeterClient, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = await ledger_with(EVENTS)
    only_beta = Customers({2: "cus_beta"})
    report = await export(ledger, client, NOW, only_beta)
    acme = [i for i in ledger.intents.values() if i.tenant_id == 1]
    assert (report.sent, report.unmapped, report.failed) == (2, len(acme), 0)
    assert {e.customer for e in provider.events} == {"cus_beta"}
    [problem] = report.problems  # one line for the tenant, not one per intent
    assert "tenant id 1" in problem and "--billing-customer" in problem
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "tenant id 1" in errors[0].getMessage()
    assert all(i.sent_at is None for i in acme)

    later = await export(ledger, client, NOW + 60)  # the operator mapped acme meanwhile
    assert (later.sent, later.unmapped) == (len(acme), 0)
    assert sums_by_tenant(provider) == expected_sums(EVENTS, NOW - GRACE)


async def test_the_fallback_setting_sends_an_unmapped_tenant_under_its_name(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    ledger = await ledger_with(EVENTS)
    report = await export(ledger, client, NOW, Customers({2: "cus_beta"}, fall_back_to_name=True))
    assert report.unmapped == 0 and report.sent == report.planned
    assert {e.customer for e in provider.events} == {"acme", "cus_beta"}


async def test_legacy_usage_has_no_customer_unless_it_falls_back_to_its_name(
    provider: BillingProvider, client: HttpMeterClient
) -> None:
    legacy = msgspec.structs.replace(event("old", H0 + 10), tenant_id=0)
    ledger = await ledger_with([legacy])
    refused = await export(ledger, client, NOW)
    assert (refused.sent, refused.unmapped) == (0, 2) and "adopt-legacy" in refused.problems[0]
    sent = await export(ledger, client, NOW, Customers(CUSTOMERS.ids, fall_back_to_name=True))
    assert sent.sent == 2 and {e.customer for e in provider.events} == {"acme"}
