"""The price book: strict parsing, effective dates, the batch discount, the defaults."""

from __future__ import annotations

import calendar
from decimal import Decimal
from pathlib import Path

import pytest

from headway.billing.prices import (
    PriceBook,
    PriceBookError,
    default_prices,
    load_prices,
    parse_prices,
)
from headway.catalog import DEFAULT_ALIASES
from headway.settings import Settings

SOURCE = "prices-under-test.toml"
HOUR = 3600


def midnight(year: int, month: int, day: int) -> int:
    return calendar.timegm((year, month, day, 0, 0, 0))


BOOK = """
currency = "USD"
batch_discount = "0.25"

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
alias = "mini"
tier = "batch"
unit = "tokens"
per = 1000
amount = "0.0040"
effective_from = 2026-12-01
effective_until = 2027-01-01

[[price]]
alias = "rerank"
tier = "interactive"
unit = "texts"
per = 1
amount = "0.001"
effective_from = 2026-06-01
"""


def book(text: str = BOOK) -> PriceBook:
    return parse_prices(text, SOURCE)


def test_the_price_in_effect_is_chosen_by_hour_from_inclusive_until_exclusive() -> None:
    prices = book()
    change = midnight(2026, 11, 15)
    before = prices.price_for("mini", "interactive", change - HOUR)
    after = prices.price_for("mini", "interactive", change)
    assert before is not None and after is not None
    assert (before.amount, before.entry.number) == (Decimal("0.0100"), 1)
    assert (after.amount, after.entry.number) == (Decimal("0.0120"), 2)
    assert after.unit == "tokens" and after.per == 1000 and after.currency == "USD"
    assert after.discount is None and after.basis == "listed"
    assert prices.price_for("mini", "interactive", midnight(2026, 1, 1) - HOUR) is None


def test_no_price_for_an_unknown_alias_tier_or_a_gap() -> None:
    prices = book()
    june = midnight(2026, 6, 1)
    assert prices.price_for("nope", "interactive", june) is None
    assert prices.price_for("mini", "premium", june) is None
    assert prices.price_for("rerank", "interactive", june - HOUR) is None
    assert prices.price_for("rerank", "interactive", june) is not None


def test_batch_without_a_price_of_its_own_pays_the_interactive_price_less_the_discount() -> None:
    prices = book()
    hour = midnight(2026, 11, 20)
    interactive = prices.price_for("mini", "interactive", hour)
    batch = prices.price_for("mini", "batch", hour)
    assert interactive is not None and batch is not None
    assert batch.amount == interactive.amount * (1 - prices.batch_discount)
    assert batch.amount == Decimal("0.009")  # 0.0120 less a quarter, exactly
    assert isinstance(batch.amount, Decimal)
    assert batch.discount == Decimal("0.25") and batch.entry == interactive.entry
    assert "discount" in batch.basis


def test_a_batch_price_of_its_own_wins_while_it_is_in_effect() -> None:
    prices = book()
    listed = prices.price_for("mini", "batch", midnight(2026, 12, 10))
    after = prices.price_for("mini", "batch", midnight(2027, 1, 1))
    assert listed is not None and after is not None
    assert (listed.amount, listed.discount, listed.entry.tier) == (Decimal("0.0040"), None, "batch")
    assert after.discount == Decimal("0.25") and after.entry.tier == "interactive"


def test_without_a_batch_discount_batch_pays_the_interactive_price() -> None:
    prices = book(BOOK.replace('batch_discount = "0.25"\n', ""))
    hour = midnight(2026, 11, 20)
    interactive = prices.price_for("mini", "interactive", hour)
    batch = prices.price_for("mini", "batch", hour)
    assert interactive is not None and batch is not None
    assert batch.amount == interactive.amount


ENTRY = """
[[price]]
alias = "mini"
unit = "tokens"
per = 1000
amount = "0.0100"
effective_from = 2026-01-01
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('currency = "USD"\nrebate = "1"\n' + ENTRY, "unknown key 'rebate'"),
        ('currency = "USD"\n' + ENTRY + 'amonut = "1"\n', "price #1 (alias 'mini'): unknown key"),
        ('currency = "USD"\n' + ENTRY.replace('"0.0100"', "0.01"), "float 0.01"),
        ('currency = "USD"\n' + ENTRY.replace('"0.0100"', "1"), "not a decimal string"),
        ('currency = "USD"\n' + ENTRY.replace('"0.0100"', '"1e-3"'), "not a decimal string"),
        ('currency = "USD"\n' + ENTRY.replace('"0.0100"', '"-0.01"'), "-0.01 is negative"),
        ('currency = "USD"\n' + ENTRY.replace('"tokens"', '"bytes"'), "unit 'bytes'"),
        ('currency = "USD"\n' + ENTRY + 'tier = "gold"\n', "tier 'gold'"),
        ('currency = "USD"\n' + ENTRY.replace("1000", "0"), "per 0 is not a positive"),
        ('currency = "USD"\n' + ENTRY.replace("1000", "true"), "per True is not a positive"),
        ('currency = "USD"\n' + ENTRY.replace('alias = "mini"\n', ""), "missing 'alias'"),
        ('currency = "USD"\n' + ENTRY.replace("2026-01-01", "2026-01-01T00:00:00Z"), "TOML date"),
        ('currency = "USD"\n' + ENTRY + "effective_until = 2026-01-01\n", "is not after"),
        ('currency = "usd"\n' + ENTRY, "'usd' is not an ISO 4217 code"),
        ('currency = "US"\n' + ENTRY, "'US' is not an ISO 4217 code"),
        (ENTRY, "missing 'currency'"),
        ('currency = "USD"\nbatch_discount = 0.5\n' + ENTRY, "batch_discount is the float"),
        ('currency = "USD"\nbatch_discount = "1.5"\n' + ENTRY, "more than 1"),
        ('currency = "USD"\nprice = 3\n', "array of tables"),
        ('currency = "USD"\n[[price]\n', "not valid TOML"),
    ],
)
def test_a_broken_book_is_refused_naming_the_file_and_the_entry(text: str, expected: str) -> None:
    with pytest.raises(PriceBookError) as caught:
        book(text)
    assert str(caught.value).startswith(SOURCE)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("", ""),  # two open-ended periods
        ("effective_until = 2026-06-01\n", ""),
        ("", "effective_until = 2026-09-01\n"),  # inside the first, which never ends
    ],
)
def test_overlapping_periods_of_one_alias_and_tier_are_refused(first: str, second: str) -> None:
    later = ENTRY.replace("2026-01-01", "2026-05-01")
    text = 'currency = "USD"\n' + ENTRY + first + later + second
    with pytest.raises(PriceBookError, match=r"price #2 .* starts before price #1 .* ends"):
        book(text)


def test_adjacent_periods_and_other_tiers_do_not_overlap() -> None:
    text = (
        'currency = "USD"\n'
        + ENTRY
        + "effective_until = 2026-05-01\n"
        + ENTRY.replace("2026-01-01", "2026-05-01")
        + ENTRY
        + 'tier = "batch"\n'
    )
    assert len(book(text).entries) == 3


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(PriceBookError, match=r"absent\.toml: cannot read"):
        load_prices(path)


def test_a_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(BOOK, encoding="utf-8")
    loaded = load_prices(path)
    assert loaded.source == str(path) and len(loaded.entries) == 4


def test_the_packaged_default_prices_every_default_alias_in_both_tiers() -> None:
    prices = default_prices()
    aliases = {*DEFAULT_ALIASES, Settings.model_fields["rerank_model"].default}
    hour = midnight(2026, 11, 1)
    for alias in sorted(aliases):
        for tier in ("interactive", "batch"):
            price = prices.price_for(alias, tier, hour)
            assert price is not None, f"the default book has no price for {alias} ({tier})"
            assert isinstance(price.amount, Decimal) and price.amount > 0
