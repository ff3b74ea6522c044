import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.routing.ejection import EjectionPolicy, Health, after_failure, after_success
from headway.gateway.routing.hedging import LatencyQuantile
from headway.gateway.routing.p2c import choose
from headway.gateway.routing.retry_budget import RetryBudget
from tests.fakes import FakeClock


def test_p2c_never_picks_the_most_loaded_of_several():
    loads = {"a": 0, "b": 5, "c": 9}
    rng = random.Random(1)
    picks = Counter(choose(list(loads), loads.__getitem__, rng) for _ in range(3000))
    assert picks["c"] == 0  # the most loaded always loses its pair
    assert picks["a"] > picks["b"] > 0  # the least loaded wins most, the middle one some


def test_p2c_edge_cases():
    rng = random.Random(0)
    assert choose([], lambda r: 0, rng) is None
    assert choose(["only"], lambda r: 0, rng) == "only"


def test_retry_budget_allows_a_share_of_recent_requests_plus_a_floor():
    clock = FakeClock(100.0)
    budget = RetryBudget(clock, ratio=0.2, min_per_s=0, window_s=10)
    for _ in range(100):
        budget.record_request()
    granted = sum(budget.try_retry() for _ in range(50))
    assert granted == 20
    clock.advance(11)  # the window slides past those requests
    assert not budget.try_retry()


def test_retry_budget_floor_lets_a_quiet_pool_retry():
    budget = RetryBudget(FakeClock(), ratio=0.2, min_per_s=1, window_s=10)
    assert sum(budget.try_retry() for _ in range(20)) == 10


POLICY = EjectionPolicy(threshold=3, base_s=1.0, max_s=8.0)


def fail(health, now, ejected_now=0, pool_size=4):
    return after_failure(health, now, POLICY, ejected_now, pool_size)


def test_consecutive_failures_eject_for_a_growing_interval():
    health = Health()
    for _ in range(3):
        health = fail(health, now=0.0)
    assert health.ejected(0.5)
    assert not health.ejected(1.0)  # first ejection: 1 s
    health = fail(health, now=1.5)  # a failed probation: straight back out, for 2 s
    assert health.ejected(3.4)
    assert not health.ejected(3.5)
    health = after_success(health)  # probation passed
    assert health.ejections == 2
    for _ in range(3):
        health = fail(health, now=10.0)
    assert health.ejected(13.9)  # third ejection: 4 s
    assert not health.ejected(14.0)


def test_success_resets_failures():
    health = fail(fail(Health(), 0.0), 0.0)
    assert after_success(health) == Health()


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=20))
def test_never_more_than_half_the_pool_is_ejected(pool_size, ejected_now):
    health = Health(consecutive_failures=10)
    after = after_failure(health, 0.0, POLICY, ejected_now, pool_size)
    if after.ejected(0.0):
        assert ejected_now + 1 <= pool_size / 2


def test_latency_quantile_is_unknown_until_enough_samples_then_follows_recent_ones():
    window = LatencyQuantile(0.95, size=100, min_samples=20, refresh_every=10)
    for _ in range(19):
        window.record(0.01)
    assert window.value_s() is None  # no hedging on a guess
    window.record(0.01)
    assert window.value_s() == 0.01
    for _ in range(100):  # the window fills with slower calls; older ones fall out
        window.record(0.2)
    assert window.value_s() == 0.2
