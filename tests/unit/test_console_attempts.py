"""The console's sign-in limiter with a fake clock: per address, per gateway, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.console.attempts import (
    GATEWAY_WINDOW_S,
    SignInAttempts,
    Throttled,
    counted_as,
)
from tests.fakes import FakeClock

WINDOW_S = 900.0


def limiter(clock: FakeClock, **limits: int) -> SignInAttempts:
    settings = {"address_failures": 5, "gateway_failures": 100, "max_addresses": 1000} | limits
    return SignInAttempts(address_window_s=WINDOW_S, clock=clock, **settings)


def test_five_failures_refuse_the_address_until_the_oldest_leaves_the_window():
    clock = FakeClock()
    attempts = limiter(clock)
    for _ in range(4):
        assert attempts.refused("10.0.0.1") is None
        assert attempts.failed("10.0.0.1") == []
        clock.advance(10)
    [lockout] = attempts.failed("10.0.0.1")  # the fifth, at +40 s: reported once
    assert lockout == Throttled("address", WINDOW_S - 40, 5, WINDOW_S)
    clock.advance(60)
    refused = attempts.refused("10.0.0.1")
    assert refused is not None and refused.scope == "address"
    assert refused.retry_after_s == WINDOW_S - 100  # the first failure leaves at +900 s
    assert attempts.refused("10.0.0.2") is None  # another address is not refused
    clock.advance(WINDOW_S - 100 - 0.5)
    assert attempts.refused("10.0.0.1") is not None
    clock.advance(0.5)
    assert attempts.refused("10.0.0.1") is None


def test_the_window_slides_one_failure_at_a_time():
    clock = FakeClock()
    attempts = limiter(clock)
    for _ in range(5):
        attempts.failed("10.0.0.1")
        clock.advance(100)
    clock.advance(WINDOW_S - 500)  # the first failure has just left the window
    assert attempts.refused("10.0.0.1") is None
    [again] = attempts.failed("10.0.0.1")  # one more try, and it is locked again at once
    assert again.retry_after_s == 100  # until the second leaves
    # Refusals are not failures: however many, the wait does not grow.
    for _ in range(50):
        refused = attempts.refused("10.0.0.1")
        assert refused is not None and refused.retry_after_s == 100


def test_failures_spread_wider_than_the_window_never_refuse():
    clock = FakeClock()
    attempts = limiter(clock)
    for _ in range(40):
        assert attempts.refused("10.0.0.1") is None
        assert attempts.failed("10.0.0.1") == []
        clock.advance(WINDOW_S / 4)  # four failures in any window


def test_a_success_clears_its_address_only():
    clock = FakeClock()
    attempts = limiter(clock)
    for _ in range(4):
        attempts.failed("10.0.0.1")
        attempts.failed("10.0.0.2")
    attempts.succeeded("10.0.0.1")
    assert attempts.tracked_addresses == 1
    assert attempts.failed("10.0.0.1") == []  # counting starts again
    assert [lockout.scope for lockout in attempts.failed("10.0.0.2")] == ["address"]


def test_the_gateway_cap_refuses_every_address_for_the_rest_of_the_minute():
    clock = FakeClock()
    attempts = limiter(clock, gateway_failures=3)
    assert attempts.failed("10.0.0.1") == []
    clock.advance(20)
    assert attempts.failed("10.0.0.2") == []
    [lockout] = attempts.failed("10.0.0.3")
    assert lockout == Throttled("gateway", GATEWAY_WINDOW_S - 20, 3, GATEWAY_WINDOW_S)
    for address in ("10.0.0.1", "10.0.0.4", "unknown"):
        refused = attempts.refused(address)
        assert refused is not None and refused.scope == "gateway"
        assert refused.retry_after_s == GATEWAY_WINDOW_S - 20
    clock.advance(GATEWAY_WINDOW_S - 20)  # the first failure is a minute old
    assert attempts.refused("10.0.0.4") is None
    [again] = attempts.failed("10.0.0.4")
    assert (again.scope, again.retry_after_s) == ("gateway", 20)


def test_a_failure_that_locks_both_reports_both():
    clock = FakeClock()
    attempts = limiter(clock, address_failures=2, gateway_failures=2)
    attempts.failed("10.0.0.1")
    assert [lockout.scope for lockout in attempts.failed("10.0.0.1")] == ["address", "gateway"]
    # Its own lockout, the longer, is what the address is told.
    refused = attempts.refused("10.0.0.1")
    assert refused is not None and refused.scope == "address"


def test_tracked_addresses_are_bounded_and_the_least_recently_failed_is_forgotten():
    clock = FakeClock()
    attempts = limiter(clock, address_failures=1, max_addresses=3)
    for address in ("a", "b", "c"):
        attempts.failed(address)
    attempts.failed("d")
    assert attempts.tracked_addresses == 3
    assert attempts.refused("a") is None  # forgotten
    assert all(attempts.refused(address) is not None for address in ("b", "c", "d"))
    for number in range(10_000):
        attempts.failed(f"flood-{number}")
    assert attempts.tracked_addresses == 3


def test_an_address_whose_failures_all_left_the_window_is_dropped():
    clock = FakeClock()
    attempts = limiter(clock)
    attempts.failed("10.0.0.1")
    clock.advance(WINDOW_S)
    assert attempts.refused("10.0.0.1") is None
    assert attempts.tracked_addresses == 0


def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one():
    assert Throttled("address", 0.2, 5, WINDOW_S).retry_after == 1
    assert Throttled("address", 41.01, 5, WINDOW_S).retry_after == 42
    assert Throttled("gateway", 60.0, 100, 60.0).retry_after == 60


def test_an_ipv6_client_is_counted_by_its_64():
    assert counted_as("2001:db8:1:2:aaaa::1") == counted_as("2001:db8:1:2:bbbb::9")
    assert counted_as("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert counted_as("2001:db8:1:3::1") != counted_as("2001:db8:1:2::1")
    assert counted_as("::ffff:198.51.100.7") == "198.51.100.7"
    assert counted_as("198.51.100.7") == "198.51.100.7"
    assert counted_as("unknown") == "unknown"


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        SignInAttempts(address_failures=0)
    with pytest.raises(ValueError, match="positive"):
        SignInAttempts(address_window_s=0)


attempts_seq = st.lists(
    st.tuples(st.integers(0, 120), st.sampled_from(["a", "b", "c", "d"])),
    min_size=1,
    max_size=200,
)


@given(attempts_seq)
def test_no_window_ever_counts_more_failures_than_the_limits(sequence):
    """A guesser that tries whenever it is not refused, and always fails: at most 3 of an
    address's failures in any 100 s, at most 5 of all in any minute."""
    clock = FakeClock(now=0.0)
    attempts = SignInAttempts(
        address_failures=3, address_window_s=100.0, gateway_failures=5, clock=clock
    )
    counted: list[tuple[float, str]] = []
    for step, address in sequence:
        clock.advance(step)
        if attempts.refused(address) is None:
            attempts.failed(address)
            counted.append((clock.now, address))
    for at, _ in counted:
        assert sum(1 for t, _ in counted if at <= t < at + GATEWAY_WINDOW_S) <= 5
        for address in "abcd":
            in_window = [t for t, a in counted if a == address and at <= t < at + 100.0]
            assert len(in_window) <= 3
