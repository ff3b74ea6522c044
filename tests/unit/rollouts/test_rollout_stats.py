import itertools

import pytest

from headway.registry.model import Observation
from headway.rollouts.compare import Agreement
from headway.rollouts.stats import (
    LATENCY_BOUNDS_S,
    LatencyHistogram,
    VersionCounts,
    merged,
)


def test_bounds_are_log_spaced_from_a_millisecond_to_a_minute():
    assert LATENCY_BOUNDS_S[0] == 0.001
    assert LATENCY_BOUNDS_S[-1] == 60.0
    assert 30 <= len(LATENCY_BOUNDS_S) <= 50
    ratios = [b / a for a, b in itertools.pairwise(LATENCY_BOUNDS_S)]
    assert all(1.3 < r < 1.36 for r in ratios)


def test_a_latency_lands_in_the_bucket_it_is_at_or_below():
    histogram = LatencyHistogram()
    for seconds in (0.0, 0.001, 0.0011, 60.0, 61.0):
        histogram.add(seconds)
    assert histogram.counts[0] == 2
    assert histogram.counts[1] == 1
    assert histogram.counts[len(LATENCY_BOUNDS_S) - 1] == 1
    assert histogram.counts[-1] == 1
    assert histogram.total == 5


def test_quantile_interpolates_inside_the_bucket():
    histogram = LatencyHistogram()
    lower, upper = LATENCY_BOUNDS_S[9], LATENCY_BOUNDS_S[10]
    for _ in range(100):
        histogram.add((lower + upper) / 2)
    assert histogram.quantile(0.5) == pytest.approx(lower + (upper - lower) * 0.5)
    assert histogram.quantile(0.95) == pytest.approx(lower + (upper - lower) * 0.95)
    assert histogram.quantile(0.0) == pytest.approx(lower)


def test_quantile_crosses_buckets_and_stops_at_the_open_one():
    histogram = LatencyHistogram()
    for _ in range(90):
        histogram.add(0.0005)
    for _ in range(10):
        histogram.add(120.0)
    assert histogram.quantile(0.5) == pytest.approx(0.001 * 50 / 90)
    assert histogram.quantile(0.95) == 60.0
    assert LatencyHistogram().quantile(0.95) is None
    with pytest.raises(ValueError, match="outside"):
        histogram.quantile(1.5)


def test_merge_adds_buckets():
    a, b = LatencyHistogram(), LatencyHistogram()
    a.add(0.01)
    b.add(0.01)
    b.add(2.0)
    a.merge(b)
    together = LatencyHistogram()
    for seconds in (0.01, 0.01, 2.0):
        together.add(seconds)
    assert a.counts == together.counts
    assert b.total == 2


def test_stored_buckets_of_another_length_are_refused():
    with pytest.raises(ValueError, match="latency buckets"):
        LatencyHistogram([1, 2, 3])


def test_counts_round_trip_through_an_observation():
    counts = VersionCounts()
    counts.record(0.02, failed=False)
    counts.record(0.5, failed=True)
    counts.record_agreement(Agreement(0.9, True))
    counts.record_agreement(Agreement(0.7, False))
    counts.record_agreement(Agreement(0.99, None))
    observation = counts.to_observation(7, 2, "gw-a", "shadow")
    assert (observation.rollout_id, observation.step, observation.gateway_id) == (7, 2, "gw-a")
    assert (observation.requests, observation.errors) == (2, 1)
    assert (observation.agreement_n, observation.top1_n, observation.top1_agree) == (3, 2, 1)
    assert observation.agreement_sum == pytest.approx(2.59)
    assert sum(observation.latency_buckets) == 2
    back = VersionCounts.from_observation(observation)
    assert back.to_observation(7, 2, "gw-a", "shadow") == observation
    assert counts.error_rate == 0.5
    assert counts.mean_agreement == pytest.approx(2.59 / 3)


def test_merged_sums_every_gateways_counts_per_role():
    a, b = VersionCounts(), VersionCounts()
    for _ in range(3):
        a.record(0.01, failed=False)
    b.record(0.01, failed=True)
    observations = [
        a.to_observation(1, 0, "gw-a", "candidate"),
        b.to_observation(1, 0, "gw-b", "candidate"),
        a.to_observation(1, 0, "gw-a", "primary"),
        Observation(1, 0, "gw-c", "primary"),  # a gateway that saw nothing: no buckets
    ]
    totals = merged(observations)
    assert (totals["candidate"].requests, totals["candidate"].errors) == (4, 1)
    assert totals["candidate"].latency.total == 4
    assert totals["primary"].requests == 3
    assert totals["shadow"].requests == 0
    assert totals["shadow"].mean_agreement is None
