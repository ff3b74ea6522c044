"""Invoices: a tenant's UTC month of hourly usage, priced by the price book.

One invoice per tenant id with usage in the month (exactly one, possibly empty, for a tenant
asked for): a tenant created with a deleted one's name gets its own, its name printed beside
the id; legacy rows (``LEGACY_TENANT_ID``) are invoiced per name. A line is one (alias,
tier, unit price): versions and endpoints share it, and a price that changes mid-month makes
two.

The rounding rule: a line's amount is ``quantity × amount / per`` computed exactly, then
rounded to the currency's minor unit (ISO 4217) with ``ROUND_HALF_EVEN``. The subtotal is
the sum of the rounded lines and the total is the subtotal (tax and credits are the billing
provider's), so the total is always the sum of the lines printed. Usage that the book has
no price for raises ``UnpricedUsage``: never free by omission. The same rows and book always
give the same invoices, and ``render_json`` and ``render_csv`` the same bytes.
"""

from __future__ import annotations

import calendar
import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from headway.billing.ledger.base import HourlyUsage
from headway.billing.prices import EXACT, PriceBook, Unit, UnitPrice
from headway.metering.event import LEGACY_TENANT_ID
from headway.utc import rfc3339

_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")
_MINOR_UNITS = {
    **dict.fromkeys(
        ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX"), 0
    ),
    **dict.fromkeys(("UYI", "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
"""ISO 4217 currencies whose minor unit is not the usual 1/100."""

CSV_HEADER = (
    "tenant_id",
    "tenant",
    "month",
    "currency",
    "kind",
    "alias",
    "tier",
    "period_start",
    "period_end",
    "unit",
    "quantity",
    "requests",
    "unit_amount",
    "per",
    "price_basis",
    "amount",
)
"""``kind`` is ``line`` (one per invoice line) or ``total`` (one per invoice, last:
its ``requests`` and ``amount`` are the invoice's; the line columns are empty)."""


class InvoiceError(Exception):
    """An invoice cannot be built as asked."""


class BadMonth(InvoiceError):
    """The month is not a ``YYYY-MM`` from 1970 on."""


class UnpricedUsage(InvoiceError):
    """Billable usage in an hour for which the price book has no price."""

    def __init__(self, tenant: str, alias: str, tier: str, hour: int, source: str) -> None:
        super().__init__(
            f"tenant {tenant!r} used {alias!r} (tier {tier}) in the hour starting "
            f"{rfc3339(hour)}, and {source} has no price for it then; add a [[price]] with "
            f"alias = {alias!r} covering that hour to the price book (billing.price_book)"
        )
        self.tenant = tenant
        self.alias = alias
        self.tier = tier
        self.hour = hour


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    alias: str
    tier: str
    period_start: int
    """Unix seconds: the start of the line's first hour of usage."""
    period_end: int
    """Unix seconds: the end of its last hour."""
    unit: Unit
    quantity: int
    requests: int
    price: UnitPrice
    amount: Decimal
    """Rounded to the currency's minor unit (the module's rounding rule)."""


@dataclass(frozen=True, slots=True)
class Invoice:
    tenant_id: int
    tenant: str
    month: str
    period_start: int
    period_end: int
    currency: str
    lines: tuple[InvoiceLine, ...]
    subtotal: Decimal
    total: Decimal


def month_range(month: str) -> tuple[int, int]:
    """``"2026-11"`` → the unix seconds of its first instant and of the next month's (UTC)."""
    match = _MONTH.fullmatch(month)
    if match is None or not 1 <= int(match[2]) <= 12 or int(match[1]) < 1970:
        raise BadMonth(f"month {month!r} is not YYYY-MM (such as 2026-11) from 1970 on")
    year, number = int(match[1]), int(match[2])
    following = (year + 1, 1) if number == 12 else (year, number + 1)
    return (
        calendar.timegm((year, number, 1, 0, 0, 0)),
        calendar.timegm((*following, 1, 0, 0, 0)),
    )


def minor_unit(currency: str) -> int:
    """Decimals of the currency's minor unit (ISO 4217)."""
    return _MINOR_UNITS.get(currency, 2)


Owner = tuple[int, str]
"""Whose invoice: a tenant id and the name printed with it (for legacy rows, each name's)."""


def build_invoices(
    hours: Sequence[HourlyUsage],
    book: PriceBook,
    month: str,
    tenant_id: int | None,
    *,
    name: str = "",
) -> list[Invoice]:
    """The month's invoices from its aggregate rows, ordered by tenant id and name; rows
    of other months or tenants are left out. Lines are ordered by alias, tier, period.
    A tenant id asked for (other than ``LEGACY_TENANT_ID``) has one invoice, empty
    under ``name`` when it had no usage."""
    start, end = month_range(month)
    rows = sorted(
        (row for row in hours if start <= row.hour < end and tenant_id in (None, row.tenant_id)),
        key=lambda row: (
            row.tenant_id,
            row.tenant,
            row.alias,
            row.tier,
            row.hour,
            row.version,
            row.endpoint,
        ),
    )
    by_tenant: dict[Owner, dict[tuple[str, str, UnitPrice], _LineSums]] = {}
    for row in rows:
        price = book.price_for(row.alias, row.tier, row.hour)
        if price is None:
            raise UnpricedUsage(row.tenant, row.alias, row.tier, row.hour, book.source)
        lines = by_tenant.setdefault((row.tenant_id, row.tenant), {})
        sums = lines.setdefault((row.alias, row.tier, price), _LineSums(row.hour))
        sums.add(row, price.unit)
    if tenant_id not in (None, LEGACY_TENANT_ID) and not by_tenant:
        by_tenant[(tenant_id, name)] = {}
    return [
        _invoice(owner, month, start, end, book.currency, lines)
        for owner, lines in sorted(by_tenant.items(), key=lambda item: item[0])
    ]


class _LineSums:
    def __init__(self, first_hour: int) -> None:
        self.first_hour = first_hour
        self.last_hour = first_hour
        self.quantity = 0
        self.requests = 0

    def add(self, row: HourlyUsage, unit: Unit) -> None:
        self.first_hour = min(self.first_hour, row.hour)
        self.last_hour = max(self.last_hour, row.hour)
        self.quantity += row.texts if unit == "texts" else row.tokens
        self.requests += row.requests


def _invoice(
    owner: Owner,
    month: str,
    start: int,
    end: int,
    currency: str,
    lines: dict[tuple[str, str, UnitPrice], _LineSums],
) -> Invoice:
    decimals = minor_unit(currency)
    priced: list[tuple[InvoiceLine, int]] = []
    for (alias, tier, price), sums in lines.items():
        minor = line_minor_units(sums.quantity, price, decimals)
        line = InvoiceLine(
            alias,
            tier,
            sums.first_hour,
            sums.last_hour + 3600,
            price.unit,
            sums.quantity,
            sums.requests,
            price,
            _money(minor, decimals),
        )
        priced.append((line, minor))
    priced.sort(key=lambda item: _line_order(item[0]))
    total = _money(sum(minor for _, minor in priced), decimals)
    return Invoice(
        *owner,
        month,
        start,
        end,
        currency,
        tuple(line for line, _ in priced),
        total,
        total,
    )


def line_minor_units(quantity: int, price: UnitPrice, decimals: int) -> int:
    """``quantity × amount / per`` in minor units, exact, then rounded half to even."""
    scale: int = 10**decimals
    exact = Fraction(quantity) * Fraction(price.amount) * scale / price.per
    return round(exact)  # Fraction rounds ties to the even neighbour (ROUND_HALF_EVEN)


def _money(minor: int, decimals: int) -> Decimal:
    return Decimal(minor).scaleb(-decimals, EXACT)


def _line_order(line: InvoiceLine) -> tuple[str, str, int, int]:
    return (line.alias, line.tier, line.period_start, line.price.entry.number)


def render_json(invoices: Sequence[Invoice]) -> str:
    """``{"invoices": [...]}``, keys in a fixed order, money as decimal strings."""
    document = {"invoices": [_invoice_json(invoice) for invoice in invoices]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _invoice_json(invoice: Invoice) -> dict[str, object]:
    return {
        "tenant_id": invoice.tenant_id,
        "tenant": invoice.tenant,
        "month": invoice.month,
        "period": _period_json(invoice.period_start, invoice.period_end),
        "currency": invoice.currency,
        "lines": [_line_json(line) for line in invoice.lines],
        "subtotal": _text(invoice.subtotal),
        "total": _text(invoice.total),
    }


def _line_json(line: InvoiceLine) -> dict[str, object]:
    return {
        "alias": line.alias,
        "tier": line.tier,
        "period": _period_json(line.period_start, line.period_end),
        "unit": line.unit,
        "quantity": line.quantity,
        "requests": line.requests,
        "unit_price": {
            "amount": _text(line.price.amount),
            "per": line.price.per,
            "basis": line.price.basis,
            "price_entry": line.price.entry.number,
        },
        "amount": _text(line.amount),
    }


def _period_json(start: int, end: int) -> dict[str, str]:
    return {"start": rfc3339(start), "end": rfc3339(end)}


def render_csv(invoices: Sequence[Invoice]) -> str:
    """RFC 4180 (CRLF line ends, quoted where needed): ``CSV_HEADER``, then each
    invoice's lines and its total row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    for invoice in invoices:
        head = (invoice.tenant_id, invoice.tenant, invoice.month, invoice.currency)
        for line in invoice.lines:
            writer.writerow(
                (
                    *head,
                    "line",
                    line.alias,
                    line.tier,
                    rfc3339(line.period_start),
                    rfc3339(line.period_end),
                    line.unit,
                    line.quantity,
                    line.requests,
                    _text(line.price.amount),
                    line.price.per,
                    line.price.basis,
                    _text(line.amount),
                )
            )
        requests = sum(line.requests for line in invoice.lines)
        writer.writerow(
            (*head, "total", "", "", "", "", "", "", requests, "", "", "", _text(invoice.total))
        )
    return buffer.getvalue()


def _text(amount: Decimal) -> str:
    """Plain notation, never an exponent: ``0.00``, ``1200``, ``0.000005``."""
    return format(amount, "f")
