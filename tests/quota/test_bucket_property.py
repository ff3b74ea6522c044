"""bucket.take against an exact reference model, over random sequences of (dt, cost)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.quota.bucket import BucketState, Take, refund, take

# Multiples of 1/8 s and whole texts keep float arithmetic exact, so the float
# bucket and the Fraction reference must agree on every decision, not nearly.
steps = st.lists(
    st.tuples(st.integers(0, 40).map(lambda k: k / 8), st.integers(0, 60)),
    min_size=1,
    max_size=60,
)


class ReferenceBucket:
    """The textbook bucket in exact arithmetic: starts full, refills, caps, takes."""

    def __init__(self, rate: int, burst: int) -> None:
        self.rate = Fraction(rate)
        self.burst = Fraction(burst)
        self.tokens = Fraction(burst)

    def advance(self, dt: float) -> None:
        self.tokens = min(self.burst, self.tokens + Fraction(dt) * self.rate)

    def take(self, cost: int) -> bool:
        if cost <= self.tokens:
            self.tokens -= cost
            return True
        return False


@given(rate=st.integers(1, 50), burst=st.integers(1, 100), sequence=steps)
def test_take_agrees_with_the_reference_and_never_over_grants(
    rate: int, burst: int, sequence: list[tuple[float, int]]
) -> None:
    reference = ReferenceBucket(rate, burst)
    state: BucketState | None = None
    now = 100.0
    times: list[float] = []
    granted: list[int] = []
    for dt, cost in sequence:
        now += dt
        if state is not None:
            reference.advance(dt)
        outcome = take(state, now, rate, burst, cost)
        assert outcome.granted == reference.take(cost)
        assert outcome.remaining == reference.tokens
        state = outcome.state
        times.append(now)
        granted.append(cost if outcome.granted else 0)
    # Over every window [i, j] of takes: granted <= burst + rate x (t_j - t_i).
    for i in range(len(times)):
        for j in range(i, len(times)):
            assert sum(granted[i : j + 1]) <= burst + rate * (times[j] - times[i])


@given(
    rate=st.integers(1, 50),
    burst=st.integers(1, 100),
    tokens=st.integers(0, 100),
    cost=st.integers(1, 200),
)
def test_a_refusal_says_when_to_retry(rate: int, burst: int, tokens: int, cost: int) -> None:
    state = BucketState(float(min(tokens, burst)), 0.0)
    outcome: Take = take(state, 0.0, rate, burst, cost)
    if outcome.granted:
        assert cost <= min(tokens, burst)
        return
    assert outcome.state == state
    if cost > burst:
        assert outcome.retry_after_s == float("inf")
        return
    assert outcome.retry_after_s > 0
    assert take(state, outcome.retry_after_s * (1 + 1e-12), rate, burst, cost).granted
    assert not take(state, outcome.retry_after_s * (1 - 1e-9), rate, burst, cost).granted


@given(
    rate=st.integers(1, 50),
    burst=st.integers(1, 100),
    tokens=st.integers(0, 100),
    back=st.integers(0, 300),
    dt=st.integers(0, 40).map(lambda k: k / 8),
)
def test_refund_gives_back_never_above_burst(
    rate: int, burst: int, tokens: int, back: int, dt: float
) -> None:
    start = float(min(tokens, burst))
    after = refund(BucketState(start, 0.0), dt, rate, burst, back)
    assert after.tokens == min(burst, start + rate * dt + back)
    assert after.updated_s == dt
