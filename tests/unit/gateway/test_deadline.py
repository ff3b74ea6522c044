import pytest
from hypothesis import given

from headway.errors import ValidationFailed
from headway.gateway.stages.deadline import deadline_from_headers
from headway.settings import TierTimeouts
from tests import hostile
from tests.fakes import FakeClock

TIMEOUTS = TierTimeouts(default_ms=10_000, max_ms=60_000)


def remaining_ms(headers: dict[str, str]) -> float:
    deadline = deadline_from_headers(headers, TIMEOUTS, FakeClock())
    return round(deadline.remaining_s() * 1000, 6)


def test_the_header_sets_the_deadline_within_the_tiers_default_and_maximum():
    assert remaining_ms({}) == 10_000
    assert remaining_ms({"x-timeout-ms": "250"}) == 250
    assert remaining_ms({"x-timeout-ms": " 00250 "}) == 250
    assert remaining_ms({"x-timeout-ms": "600000"}) == 60_000


def test_a_timeout_of_thousands_of_digits_is_the_maximum_not_a_crash():
    assert remaining_ms({"x-timeout-ms": "9" * 5000}) == 60_000  # int() refuses > 4300 digits


@pytest.mark.parametrize("raw", ["0", "000", "-5", "1.5", "", "ten", "٣", "+7"])
def test_anything_but_a_positive_integer_of_ascii_digits_is_refused(raw):
    with pytest.raises(ValidationFailed, match="X-Timeout-Ms"):
        remaining_ms({"x-timeout-ms": raw})


@hostile.FIXED
@given(hostile.header_values)
def test_any_header_value_is_a_deadline_within_the_maximum_or_a_422(raw: str) -> None:
    deadline = hostile.value_or_client_error(
        lambda: deadline_from_headers({"x-timeout-ms": raw}, TIMEOUTS, FakeClock())
    )
    if not isinstance(deadline, ValidationFailed):
        assert 0 < deadline.remaining_s() * 1000 <= TIMEOUTS.max_ms
        assert raw.strip().isascii() and raw.strip().isdigit()
