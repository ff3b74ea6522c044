import pytest

from headway.errors import ValidationFailed
from headway.gateway.stages.deadline import deadline_from_headers
from headway.settings import TierTimeouts
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
