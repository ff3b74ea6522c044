"""Invoices: lines per price period, exact money, refusing unpriced usage, stable output."""

from __future__ import annotations

import calendar
import csv
import dataclasses
import io
import json
import random
from collections import defaultdict
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.billing.invoice import (
    CSV_HEADER,
    BadMonth,
    Invoice,
    UnpricedUsage,
    build_invoices,
    month_range,
    render_csv,
    render_json,
)
from headway.billing.ledger.base import HourlyUsage
from headway.billing.ledger.memory import MemoryLedger
from headway.billing.prices import PriceBook, parse_prices
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent
from headway.utc import rfc3339
from tests.billing.conftest import ACME, tenant_id_of

HOUR = 3600
NOV = calendar.timegm((2026, 11, 1, 0, 0, 0))
DEC = calendar.timegm((2026, 12, 1, 0, 0, 0))
CHANGE = calendar.timegm((2026, 11, 15, 0, 0, 0))
WIDE = Context(prec=200)

BOOK = """
currency = "USD"
batch_discount = "0.50"

[[price]]
alias = "mini"
unit = "tokens"
per = 1000
amount = "0.0100"
effective_from = 2026-01-01
effective_until = 2026-11-15

[[price]]
alias = "mini"
unit = "tokens"
per = 1000
amount = "0.0120"
effective_from = 2026-11-15

[[price]]
alias = "rerank"
unit = "texts"
per = 100
amount = "0.30"
effective_from = 2026-01-01
"""


def prices(text: str = BOOK) -> PriceBook:
    return parse_prices(text, "test-prices.toml")


def row(
    hour: int,
    *,
    tenant: str = "acme",
    tenant_id: int | None = None,
    alias: str = "mini",
    tier: str = "interactive",
    requests: int = 1,
    texts: int = 1,
    tokens: int = 10,
    version: str = "v1",
    endpoint: str = "embeddings",
) -> HourlyUsage:
    return HourlyUsage(
        tenant_id_of(tenant) if tenant_id is None else tenant_id,
        tenant,
        alias,
        version,
        endpoint,
        tier,
        hour,
        requests,
        texts,
        tokens,
    )


def rounded(quantity: int, amount: str, per: int) -> Decimal:
    """The oracle: exact decimal arithmetic (``per`` a power of ten), half to even."""
    exact = WIDE.divide(WIDE.multiply(Decimal(quantity), Decimal(amount)), Decimal(per))
    return exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


def only(invoices: Sequence[Invoice]) -> Invoice:
    assert len(invoices) == 1
    return invoices[0]


@pytest.mark.parametrize(
    ("month", "start", "end"),
    [
        ("2026-11", (2026, 11), (2026, 12)),
        ("2026-12", (2026, 12), (2027, 1)),
        ("2028-02", (2028, 2), (2028, 3)),
    ],
)
def test_month_range_is_the_utc_month(
    month: str, start: tuple[int, int], end: tuple[int, int]
) -> None:
    assert month_range(month) == (
        calendar.timegm((*start, 1, 0, 0, 0)),
        calendar.timegm((*end, 1, 0, 0, 0)),
    )


@pytest.mark.parametrize(
    "month", ["2026-13", "2026-00", "2026-1", "26-11", "2026-11-01", "", "1969-12"]
)
def test_a_bad_month_is_refused(month: str) -> None:
    with pytest.raises(BadMonth, match="YYYY-MM"):
        month_range(month)


def test_three_thousandths_of_a_cent_sum_exactly() -> None:
    rows = [row(NOV + i * HOUR, tokens=1000) for i in range(3)]
    invoice = only(build_invoices(rows, prices(), "2026-11", None))
    (line,) = invoice.lines
    assert line.quantity == 3000 and line.requests == 3
    assert line.amount == Decimal("0.03") and invoice.total == Decimal("0.03")
    assert str(invoice.total) == "0.03"


def test_a_line_is_rounded_once_not_hour_by_hour() -> None:
    rows = [row(NOV + i * HOUR, tokens=400) for i in range(3)]  # 0.004 each: 0.00 alone
    invoice = only(build_invoices(rows, prices(), "2026-11", None))
    assert invoice.total == Decimal("0.01") == rounded(1200, "0.0100", 1000)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(500, "0.00"), (1500, "0.02"), (2500, "0.02"), (3500, "0.04"), (501, "0.01")],
)
def test_each_line_is_rounded_half_to_even(tokens: int, expected: str) -> None:
    book = prices(BOOK.replace('amount = "0.0100"', 'amount = "0.01"'))
    invoice = only(build_invoices([row(NOV, tokens=tokens)], book, "2026-11", None))
    assert invoice.lines[0].amount == Decimal(expected) == rounded(tokens, "0.01", 1000)


def test_a_price_change_mid_month_makes_two_lines_in_period_order() -> None:
    early = [row(NOV + 4 * 24 * HOUR, tokens=40_000), row(CHANGE - HOUR, tokens=1_000)]
    late = [row(CHANGE, tokens=7_000), row(CHANGE + 5 * 24 * HOUR, tokens=3_000)]
    invoice = only(build_invoices(late + early, prices(), "2026-11", ACME))
    first, second = invoice.lines
    assert (first.price.amount, first.quantity) == (Decimal("0.0100"), 41_000)
    assert (first.period_start, first.period_end) == (early[0].hour, CHANGE)
    assert (second.price.amount, second.quantity) == (Decimal("0.0120"), 10_000)
    assert (second.period_start, second.period_end) == (CHANGE, late[1].hour + HOUR)
    assert first.amount == rounded(41_000, "0.0100", 1000)
    assert second.amount == rounded(10_000, "0.0120", 1000)
    assert invoice.total == invoice.subtotal == first.amount + second.amount


def test_versions_and_endpoints_of_an_alias_share_a_line_charged_on_its_unit() -> None:
    rows = [
        row(NOV, alias="rerank", version="v1", endpoint="rerank", texts=30, tokens=999),
        row(NOV + HOUR, alias="rerank", version="v2", endpoint="rerank", texts=12, tokens=999),
    ]
    (line,) = only(build_invoices(rows, prices(), "2026-11", None)).lines
    assert (line.unit, line.quantity, line.requests) == ("texts", 42, 2)
    assert line.amount == rounded(42, "0.30", 100)


def test_batch_work_is_a_line_of_its_own_at_the_discounted_price() -> None:
    rows = [row(NOV, tokens=9_000), row(NOV, tier="batch", tokens=9_000)]
    batch, interactive = sorted(
        only(build_invoices(rows, prices(), "2026-11", None)).lines, key=lambda line: line.tier
    )
    assert (batch.tier, interactive.tier) == ("batch", "interactive")
    assert batch.price.amount == Decimal("0.0100") * Decimal("0.50")
    assert batch.price.discount == Decimal("0.50")
    assert batch.amount == rounded(9_000, str(batch.price.amount), 1000)
    assert interactive.amount == rounded(9_000, "0.0100", 1000)


@pytest.mark.parametrize(
    ("usage", "alias", "tier"),
    [
        (row(NOV + 5 * HOUR, alias="secret-model"), "secret-model", "interactive"),
        (row(NOV + 5 * HOUR, tier="premium"), "mini", "premium"),
    ],
)
def test_unpriced_usage_is_an_error_naming_tenant_alias_tier_and_hour(
    usage: HourlyUsage, alias: str, tier: str
) -> None:
    rows = [row(NOV), usage]
    with pytest.raises(UnpricedUsage) as caught:
        build_invoices(rows, prices(), "2026-11", None)
    error = caught.value
    assert (error.tenant, error.alias, error.tier, error.hour) == ("acme", alias, tier, usage.hour)
    for part in ("'acme'", repr(alias), tier, rfc3339(usage.hour), "test-prices.toml"):
        assert part in str(error)


def test_usage_in_a_gap_between_prices_is_unpriced() -> None:
    book = prices(BOOK.replace("effective_from = 2026-11-15", "effective_from = 2026-11-16"))
    gap = CHANGE + 3 * HOUR
    with pytest.raises(UnpricedUsage) as caught:
        build_invoices([row(gap)], book, "2026-11", None)
    assert caught.value.hour == gap


def test_one_invoice_per_tenant_in_order_and_only_the_month_asked_for() -> None:
    rows = [
        row(NOV, tenant="zeta", tokens=5_000),
        row(NOV, tenant="acme", tokens=7_000),
        row(NOV - HOUR, tenant="acme", tokens=1_000_000),  # October
        row(DEC, tenant="acme", tokens=1_000_000),  # December
        row(NOV - HOUR, tenant="early", tokens=1),
    ]
    invoices = build_invoices(rows, prices(), "2026-11", None)
    assert [invoice.tenant for invoice in invoices] == ["acme", "zeta"]
    assert [invoice.lines[0].quantity for invoice in invoices] == [7_000, 5_000]
    assert all((i.period_start, i.period_end) == (NOV, DEC) for i in invoices)
    zeta = tenant_id_of("zeta")
    assert [i.tenant for i in build_invoices(rows, prices(), "2026-11", zeta)] == ["zeta"]


def test_a_tenant_asked_for_without_usage_gets_an_empty_invoice() -> None:
    invoice = only(build_invoices([row(NOV)], prices(), "2026-11", 999, name="nobody"))
    assert (invoice.tenant_id, invoice.tenant, invoice.lines, invoice.total) == (
        999,
        "nobody",
        (),
        Decimal("0.00"),
    )


def test_a_re_created_name_is_invoiced_apart_and_legacy_rows_per_name() -> None:
    rows = [
        row(NOV, tenant="acme", tenant_id=1, tokens=1_000),  # deleted in November...
        row(NOV + HOUR, tenant="acme", tenant_id=9, tokens=2_000),  # ...and created again
        row(NOV, tenant="acme", tenant_id=LEGACY_TENANT_ID, tokens=4_000),  # before ids
        row(NOV, tenant="beta", tenant_id=LEGACY_TENANT_ID, tokens=8_000),
    ]
    invoices = build_invoices(rows, prices(), "2026-11", None)
    assert [(i.tenant_id, i.tenant, i.lines[0].quantity) for i in invoices] == [
        (LEGACY_TENANT_ID, "acme", 4_000),
        (LEGACY_TENANT_ID, "beta", 8_000),
        (1, "acme", 1_000),
        (9, "acme", 2_000),
    ]
    (new,) = build_invoices(rows, prices(), "2026-11", 9)
    assert (new.tenant_id, new.tenant, new.lines[0].quantity) == (9, "acme", 2_000)
    legacy = build_invoices(rows, prices(), "2026-11", LEGACY_TENANT_ID)
    assert [(i.tenant, i.lines[0].quantity) for i in legacy] == [("acme", 4_000), ("beta", 8_000)]


def golden_rows() -> list[HourlyUsage]:
    return [
        row(NOV + 2 * HOUR, tokens=12_345, requests=3),
        row(CHANGE + HOUR, tokens=6_789, requests=2),
        row(NOV + 9 * HOUR, tier="batch", tokens=1_005, requests=1),
        row(NOV, tenant='b,"c"', alias="rerank", endpoint="rerank", texts=250, requests=4),
    ]


def line_document(
    usage: Sequence[HourlyUsage],
    amount: str,
    per: int,
    basis: str,
    entry: int,
    unit: str = "tokens",
) -> dict[str, object]:
    quantity = sum(r.tokens if unit == "tokens" else r.texts for r in usage)
    return {
        "alias": usage[0].alias,
        "tier": usage[0].tier,
        "period": {
            "start": rfc3339(min(r.hour for r in usage)),
            "end": rfc3339(max(r.hour for r in usage) + HOUR),
        },
        "unit": unit,
        "quantity": quantity,
        "requests": sum(r.requests for r in usage),
        "unit_price": {"amount": amount, "per": per, "basis": basis, "price_entry": entry},
        "amount": str(rounded(quantity, amount, per)),
    }


def invoice_document(tenant: str, lines: list[dict[str, object]]) -> dict[str, object]:
    total = str(sum(Decimal(str(line["amount"])) for line in lines))
    return {
        "tenant_id": tenant_id_of(tenant),
        "tenant": tenant,
        "month": "2026-11",
        "period": {"start": rfc3339(NOV), "end": rfc3339(DEC)},
        "currency": "USD",
        "lines": lines,
        "subtotal": total,
        "total": total,
    }


def test_json_is_the_invoices_in_a_fixed_shape_with_money_as_strings() -> None:
    usage = golden_rows()
    expected = {
        "invoices": [
            invoice_document(
                "acme",
                [
                    line_document(
                        [usage[2]], "0.005000", 1000, "interactive less 0.50 batch discount", 1
                    ),
                    line_document([usage[0]], "0.0100", 1000, "listed", 1),
                    line_document([usage[1]], "0.0120", 1000, "listed", 2),
                ],
            ),
            invoice_document(
                'b,"c"', [line_document([usage[3]], "0.30", 100, "listed", 3, unit="texts")]
            ),
        ]
    }
    text = render_json(build_invoices(usage, prices(), "2026-11", None))
    assert text == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    json.loads(text, parse_float=refuse_float)


def refuse_float(literal: str) -> object:
    raise AssertionError(f"a float in the JSON: {literal}")


def test_csv_has_a_header_a_row_per_line_and_a_total_row_per_invoice() -> None:
    usage = golden_rows()
    invoices = build_invoices(usage, prices(), "2026-11", None)
    text = render_csv(invoices)
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    expected: list[list[str]] = [list(CSV_HEADER)]
    for invoice in invoices:
        head = [str(invoice.tenant_id), invoice.tenant, invoice.month, invoice.currency]
        for line in invoice.lines:
            expected.append(
                [
                    *head,
                    "line",
                    line.alias,
                    line.tier,
                    rfc3339(line.period_start),
                    rfc3339(line.period_end),
                    line.unit,
                    str(line.quantity),
                    str(line.requests),
                    str(line.price.amount),
                    str(line.price.per),
                    line.price.basis,
                    str(line.amount),
                ]
            )
        requests = str(sum(r.requests for r in usage if r.tenant == invoice.tenant))
        expected.append([*head, "total", *[""] * 6, requests, "", "", "", str(invoice.total)])
    assert parsed == expected
    assert [row[4] for row in parsed].count("total") == 2
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", "")
    quoted = "\r\n" + str(tenant_id_of('b,"c"')) + ',"b,""c""",2026-11,'
    assert quoted in text  # RFC 4180 quoting of a comma and a quote


def usage_events() -> list[UsageEvent]:
    rng = random.Random(7)
    return [
        UsageEvent(
            request_id=f"r{i}",
            tenant_id=tenant_id_of(tenant),
            tenant=tenant,
            key_id="k1",
            endpoint="embeddings",
            alias="mini",
            version=rng.choice(["v1", "v2"]),
            tier=rng.choice(["interactive", "batch"]),
            texts=rng.randint(1, 8),
            tokens=rng.randint(1, 5_000),
            outcome="served",
            billable=True,
            queue_s=0.0,
            inference_s=0.0,
            total_s=0.0,
            gateway_id="gw",
            at=NOV + rng.randint(0, DEC - NOV - 1),
        )
        for i, tenant in enumerate(rng.choices(["acme", "beta"], k=300))
    ]


async def rendered_from_a_ledger(events: list[UsageEvent], batch: int) -> tuple[str, str]:
    ledger = MemoryLedger()
    for start in range(0, len(events), batch):
        await ledger.apply(events[start : start + batch], [])
    invoices = build_invoices(
        await ledger.hours(*month_range("2026-11"), None), prices(), "2026-11", None
    )
    return render_json(invoices), render_csv(invoices)


async def test_the_same_usage_gives_byte_identical_invoices() -> None:
    events = usage_events()
    first = await rendered_from_a_ledger(events, 50)
    shuffled = events[:]
    random.Random(1).shuffle(shuffled)
    assert await rendered_from_a_ledger(shuffled, 7) == first
    assert await rendered_from_a_ledger(events, 50) == first
    assert json.loads(first[0])["invoices"][0]["lines"]  # there is something to compare


PERS = (1, 3, 7, 1000, 1_000_000)


@st.composite
def books(draw: st.DrawFn) -> str:
    lines = [
        'currency = "USD"',
        f'batch_discount = "{draw(st.sampled_from(["0", "0.5", "0.333"]))}"',
    ]
    for alias in ("m1", "m2"):
        cut = draw(st.integers(2, 29))
        for start, until in (("2026-01-01", f"2026-11-{cut:02d}"), (f"2026-11-{cut:02d}", None)):
            places = draw(st.integers(0, 6))
            amount = Decimal(draw(st.integers(0, 10**8))).scaleb(-places)
            lines += [
                "[[price]]",
                f'alias = "{alias}"',
                f'unit = "{draw(st.sampled_from(["texts", "tokens"]))}"',
                f"per = {draw(st.sampled_from(PERS))}",
                f'amount = "{amount:f}"',
                f"effective_from = {start}",
                *([f"effective_until = {until}"] if until else []),
            ]
    return "\n".join(lines) + "\n"


usages = st.lists(
    st.builds(
        row,
        st.integers(0, (DEC - NOV) // HOUR - 1).map(lambda i: NOV + i * HOUR),
        tenant=st.sampled_from(["a", "b"]),
        alias=st.sampled_from(["m1", "m2"]),
        tier=st.sampled_from(["interactive", "batch"]),
        requests=st.integers(1, 10**6),
        texts=st.integers(0, 10**9),
        tokens=st.integers(0, 10**12),
    ),
    max_size=40,
)


def floats_in(value: object) -> list[object]:
    if isinstance(value, float):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            f for field in dataclasses.fields(value) for f in floats_in(getattr(value, field.name))
        ]
    if isinstance(value, tuple | list):
        return [f for item in value for f in floats_in(item)]
    return []


@settings(max_examples=200, deadline=None)
@given(book_text=books(), usage=usages)
def test_the_total_is_the_sum_of_lines_each_rounded_from_its_exact_amount(
    book_text: str, usage: list[HourlyUsage]
) -> None:
    book = prices(book_text)
    invoices = build_invoices(usage, book, "2026-11", None)
    billed: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for invoice in invoices:
        assert invoice.total == invoice.subtotal == sum(line.amount for line in invoice.lines)
        assert invoice.total.as_tuple().exponent == -2
        for line in invoice.lines:
            exact = Fraction(line.quantity) * Fraction(line.price.amount) / line.price.per
            assert line.amount.as_tuple().exponent == -2
            assert abs(Fraction(line.amount) - exact) <= Fraction(1, 200)
            if line.price.per in (1, 1000, 1_000_000):
                assert line.amount == rounded(line.quantity, str(line.price.amount), line.price.per)
            billed[(invoice.tenant, line.alias, line.tier, line.unit)] += line.quantity
    used: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for usage_row in usage:
        price = book.price_for(usage_row.alias, usage_row.tier, usage_row.hour)
        assert price is not None
        quantity = usage_row.texts if price.unit == "texts" else usage_row.tokens
        used[(usage_row.tenant, usage_row.alias, usage_row.tier, price.unit)] += quantity
    assert billed == used
    assert floats_in(invoices) == []
    json.loads(render_json(invoices), parse_float=refuse_float)
