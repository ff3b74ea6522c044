"""The price book: what a unit of work costs, per model alias and tier, over time.

A TOML file; every amount is a decimal *string* (a float is an error) and every date a TOML
date, meaning 00:00 UTC::

    currency = "USD"            # ISO 4217: three upper-case letters; required
    batch_discount = "0.50"     # optional, default "0": the fraction off the interactive
                                # price for batch work in an hour with no batch price
    [[price]]
    alias = "all-MiniLM-L6-v2"  # the model name clients ask for (the event's alias)
    unit = "tokens"             # or "texts": what the amount is charged on
    per = 1000                  # the amount is per this many units
    amount = "0.0100"
    tier = "interactive"        # optional: "interactive" (the default) or "batch"
    effective_from = 2026-01-01 # inclusive
    effective_until = 2026-12-01  # optional, exclusive; omitted: until further notice

Parsing is strict, and every error names the file and the entry (``PriceBookError``); two
periods of one ``(alias, tier)`` must not overlap. Usage in a gap between periods is
unpriced, which the invoice refuses (``invoice.UnpricedUsage``), never free. Money is
``decimal.Decimal`` throughout, and a batch price derived from the discount is exact.
"""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal, Inexact, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Literal, get_args

Unit = Literal["texts", "tokens"]
Tier = Literal["interactive", "batch"]

UNITS: tuple[Unit, ...] = get_args(Unit)
TIERS: tuple[Tier, ...] = get_args(Tier)
DEFAULT_PRICES = "default_prices.toml"
"""Example prices for the default models, packaged beside this module."""

_TOP_KEYS = frozenset({"currency", "batch_discount", "price"})
_ENTRY_KEYS = frozenset(
    {"alias", "unit", "per", "amount", "tier", "effective_from", "effective_until"}
)
_REQUIRED_KEYS = ("alias", "unit", "per", "amount", "effective_from")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_CURRENCY = re.compile(r"[A-Z]{3}")
EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation])
"""Arithmetic on money in this context is exact, or raises (never rounds silently)."""


class PriceBookError(Exception):
    """The price book cannot be read, or breaks a rule of its format."""


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """One ``[[price]]`` of the file."""

    number: int
    """Its position in the file, from 1 (errors and invoices name it)."""
    alias: str
    tier: Tier
    unit: Unit
    per: int
    amount: Decimal
    effective_from: int
    """Unix seconds, inclusive."""
    effective_until: int | None
    """Unix seconds, exclusive; None: open-ended."""

    def covers(self, hour: int) -> bool:
        return self.effective_from <= hour and (
            self.effective_until is None or hour < self.effective_until
        )

    def describe(self) -> str:
        return f"price #{self.number} (alias {self.alias!r}, tier {self.tier})"


@dataclass(frozen=True, slots=True)
class UnitPrice:
    """What one ``per`` units cost in an hour, and where that comes from."""

    unit: Unit
    per: int
    amount: Decimal
    currency: str
    entry: PriceEntry
    """The listed price it comes from: the interactive one when ``discount`` is set."""
    discount: Decimal | None
    """Set when batch work pays ``entry.amount`` less this fraction."""

    @property
    def basis(self) -> str:
        if self.discount is None:
            return "listed"
        return f"{self.entry.tier} less {self.discount} batch discount"


class PriceBook:
    """The entries of one file, checked for overlaps, indexed by (alias, tier)."""

    def __init__(
        self, currency: str, batch_discount: Decimal, entries: Sequence[PriceEntry], source: str
    ) -> None:
        self.currency = currency
        self.batch_discount = batch_discount
        self.entries = tuple(entries)
        self.source = source
        """The file it was read from, for messages."""
        by_key: dict[tuple[str, str], list[PriceEntry]] = {}
        for entry in self.entries:
            by_key.setdefault((entry.alias, entry.tier), []).append(entry)
        for periods in by_key.values():
            periods.sort(key=lambda entry: entry.effective_from)
            _check_no_overlap(periods, source)
        self._by_key = {key: tuple(periods) for key, periods in by_key.items()}

    def price_for(self, alias: str, tier: str, at_hour: int) -> UnitPrice | None:
        """The price of ``alias`` work in ``tier`` during the hour starting ``at_hour``;
        None when the book has none (an unknown alias or tier, or a gap)."""
        listed = self._listed(alias, tier, at_hour)
        if listed is not None:
            return UnitPrice(listed.unit, listed.per, listed.amount, self.currency, listed, None)
        if tier != "batch":
            return None
        interactive = self._listed(alias, "interactive", at_hour)
        if interactive is None:
            return None
        amount = EXACT.multiply(interactive.amount, EXACT.subtract(Decimal(1), self.batch_discount))
        return UnitPrice(
            interactive.unit,
            interactive.per,
            amount,
            self.currency,
            interactive,
            self.batch_discount,
        )

    def _listed(self, alias: str, tier: str, hour: int) -> PriceEntry | None:
        for entry in self._by_key.get((alias, tier), ()):
            if entry.covers(hour):
                return entry
        return None


def load_prices(path: Path) -> PriceBook:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PriceBookError(f"{path}: cannot read the price book: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise PriceBookError(f"{path}: not UTF-8 text: {exc}") from exc
    return parse_prices(text, str(path))


def configured_prices(path: Path | None) -> PriceBook:
    """The book at ``billing.price_book``, or the packaged one when it is not set."""
    return load_prices(path) if path is not None else default_prices()


def missing_prices(book: PriceBook, aliases: Sequence[str], now: float) -> list[str]:
    """One message per alias the book has no interactive price for now, saying how to add
    one: usage of such an alias is metered, but no invoice can be printed for it."""
    hour = int(now) // 3600 * 3600
    today = dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()
    where = (
        f"your price book (a copy of {book.source}: `headway billing prices > prices.toml`; "
        "name it with billing.price_book or `headway billing invoice --prices`)"
        if book.source.startswith("headway/")
        else book.source
    )
    return [
        f"alias {alias!r} has no price in {book.source}: its usage is metered, and no invoice "
        f"can be printed for it until {where} has an entry such as\n"
        f'  [[price]]\n  alias = "{alias}"\n  unit = "tokens"\n  per = 1000\n'
        f'  amount = "0.0100"\n  effective_from = {today}'
        for alias in aliases
        if book.price_for(alias, "interactive", hour) is None
    ]


def default_prices_text() -> str:
    """The packaged example price book, as its TOML: what a copy of it starts from."""
    return resources.files("headway.billing").joinpath(DEFAULT_PRICES).read_text(encoding="utf-8")


def default_prices() -> PriceBook:
    """The packaged example prices for the default models."""
    return parse_prices(default_prices_text(), f"headway/billing/{DEFAULT_PRICES}")


def parse_prices(text: str, source: str) -> PriceBook:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PriceBookError(f"{source}: not valid TOML: {exc}") from exc
    _check_keys(document, _TOP_KEYS, source)
    if "currency" not in document:
        raise PriceBookError(f"{source}: missing 'currency' (an ISO 4217 code such as \"USD\")")
    currency = document["currency"]
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise PriceBookError(
            f"{source}: currency {currency!r} is not an ISO 4217 code (three upper-case letters)"
        )
    discount = _decimal(document.get("batch_discount", "0"), f"{source}: batch_discount")
    if discount > 1:
        raise PriceBookError(f"{source}: batch_discount {discount} is more than 1 (all of it)")
    tables = document.get("price", [])
    if not isinstance(tables, list):
        raise PriceBookError(f"{source}: 'price' must be an array of tables ([[price]])")
    entries = tuple(_entry(table, number, source) for number, table in enumerate(tables, 1))
    return PriceBook(currency, discount, entries, source)


def _entry(table: object, number: int, source: str) -> PriceEntry:
    where = f"{source}: price #{number}"
    if not isinstance(table, dict):
        raise PriceBookError(f"{where}: must be a table ([[price]])")
    if isinstance(table.get("alias"), str):
        where += f" (alias {table['alias']!r})"
    _check_keys(table, _ENTRY_KEYS, where)
    for key in _REQUIRED_KEYS:
        if key not in table:
            raise PriceBookError(f"{where}: missing {key!r}")
    alias = table["alias"]
    if not isinstance(alias, str) or not alias:
        raise PriceBookError(f"{where}: alias must be a non-empty string")
    unit = table["unit"]
    if unit not in UNITS:
        raise PriceBookError(f"{where}: unit {unit!r} is not one of {', '.join(UNITS)}")
    tier = table.get("tier", "interactive")
    if tier not in TIERS:
        raise PriceBookError(f"{where}: tier {tier!r} is not one of {', '.join(TIERS)}")
    per = table["per"]
    if isinstance(per, bool) or not isinstance(per, int) or per <= 0:
        raise PriceBookError(f"{where}: per {per!r} is not a positive integer")
    amount = _decimal(table["amount"], f"{where}: amount")
    start = _midnight(table["effective_from"], f"{where}: effective_from")
    end = None
    if "effective_until" in table:
        end = _midnight(table["effective_until"], f"{where}: effective_until")
        if end <= start:
            raise PriceBookError(f"{where}: effective_until is not after effective_from")
    return PriceEntry(number, alias, tier, unit, per, amount, start, end)


def _check_keys(table: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PriceBookError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _decimal(value: object, what: str) -> Decimal:
    """A non-negative decimal written as a string: ``"0.0100"``; no float, sign or exponent."""
    if isinstance(value, float):
        raise PriceBookError(f'{what} is the float {value!r}; write it as a string: "{value}"')
    if not isinstance(value, str) or not _DECIMAL.fullmatch(value):
        raise PriceBookError(f'{what} {value!r} is not a decimal string such as "0.0100"')
    amount = Decimal(value)
    if amount < 0:
        raise PriceBookError(f"{what} {value} is negative")
    return amount


def _midnight(value: object, what: str) -> int:
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        raise PriceBookError(f"{what} {value!r} is not a TOML date such as 2026-11-01")
    return calendar.timegm(value.timetuple())


def _check_no_overlap(periods: Sequence[PriceEntry], source: str) -> None:
    """``periods``: one (alias, tier)'s entries, sorted by start."""
    for earlier, later in itertools.pairwise(periods):
        if earlier.effective_until is None or later.effective_from < earlier.effective_until:
            raise PriceBookError(
                f"{source}: {later.describe()} starts before {earlier.describe()} ends: "
                "the periods of one alias and tier must not overlap"
            )
