"""Whole numbers from query strings and form fields: ASCII digits only, bounded, 422 else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.errors import ValidationFailed
from headway.gateway.query import query_limit, whole_number


@pytest.mark.parametrize(
    "text",
    [
        "²",
        "٣",
        "１２",
        "1" * 5000,
        "0" * 5000 + "11",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1_0",
        "1e3",
        "",
        "0",
    ],
)
def test_anything_but_ascii_digits_in_range_is_a_422_naming_the_range(text: str) -> None:
    with pytest.raises(ValidationFailed, match=r"^n must be a whole number from 1 to 10$"):
        whole_number(text, "n", least=1, most=10)


def test_leading_zeros_however_many_are_still_the_number() -> None:
    assert whole_number("0" * 5000 + "7", "n", least=1, most=10) == 7
    assert whole_number("10", "n", least=1, most=10) == 10


@given(st.text(max_size=40))
def test_no_text_raises_anything_but_validation_failed(text: str) -> None:
    try:
        value = whole_number(text, "n", least=3600, most=30 * 86400)
    except ValidationFailed:
        return
    assert text.isascii() and text.isdigit() and 3600 <= value <= 30 * 86400


def test_a_missing_limit_is_the_default() -> None:
    assert query_limit(None, default=20, most=100) == 20
    assert query_limit("100", default=20, most=100) == 100
    with pytest.raises(ValidationFailed, match="limit must be a whole number from 1 to 100"):
        query_limit("101", default=20, most=100)
