"""Numbers and parameters from query strings, form fields, paths and headers
(``gateway/query.py``): ASCII digits only, capped before ``int``, bounded, 422 else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.errors import ValidationFailed
from headway.gateway.query import decimal, one_each, query_limit, whole_number
from tests import hostile


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


@hostile.FIXED
@given(hostile.client_values, st.integers(min_value=0, max_value=2**64))
def test_decimal_is_the_value_of_ascii_digits_capped_and_none_for_anything_else(
    text: str, cap: int
) -> None:
    number = decimal(text, cap=cap)
    if not text or not all(c in "0123456789" for c in text):
        assert number is None
    elif len(text.lstrip("0")) > 25:  # far above any cap here: no int() needed to know
        assert number == cap
    else:
        assert number == min(int(text.lstrip("0") or "0"), cap)


@hostile.FIXED
@given(hostile.client_values, st.integers(0, 10**6), st.integers(0, 10**20))
def test_whole_number_of_any_text_is_in_range_or_a_422(text: str, least: int, span: int) -> None:
    value = hostile.value_or_client_error(
        lambda: whole_number(text, "n", least=least, most=least + span)
    )
    assert isinstance(value, ValidationFailed) or least <= value <= least + span


@hostile.FIXED
@given(
    st.dictionaries(hostile.texts, st.lists(hostile.client_values, max_size=3), max_size=6),
    st.frozensets(hostile.texts, max_size=4),
)
def test_one_each_of_any_query_is_its_values_or_a_422_naming_the_parameter(
    params: dict[str, list[str]], allowed: frozenset[str]
) -> None:
    one = hostile.value_or_client_error(lambda: one_each(params, allowed))
    if isinstance(one, ValidationFailed):
        assert any(
            name not in allowed or len(v) != 1 or "\x00" in v[0] for name, v in params.items()
        )
    else:
        assert one == {name: values[0] for name, values in params.items()}


def test_a_value_holding_a_nul_is_a_422_naming_it() -> None:
    with pytest.raises(ValidationFailed, match="after holds a NUL"):
        one_each({"after": ["file-\x00"]}, {"after"})
