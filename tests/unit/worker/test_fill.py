"""The batch-fill wait (worker/fill.py) on made-up queues, rates and costs: no clock."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.worker.fill import Cost, Queued, adaptive_wait_s, fixed_wait_s

NOW = 1000.0
ACCELERATOR = Cost(per_call_s=0.050, per_text_s=0.005)  # the synthetic backend's default
PER_TEXT = Cost(per_call_s=0.0, per_text_s=0.010)  # a model on a CPU: batching saves nothing


def queued(texts: int = 1, age_s: float = 0.0, deadline_in_s: float = 10.0) -> Queued:
    return Queued(texts, NOW - age_s, NOW + deadline_in_s)


def wait(q: Queued, rate: float, cost: Cost = ACCELERATOR, batch: int = 32, max_wait: float = 1.0):
    return adaptive_wait_s(NOW, q, rate, cost, batch, max_wait)


def test_at_idle_nothing_is_expected_so_the_batch_runs_at_once():
    assert wait(queued(), rate=0.0) == 0.0
    assert wait(queued(), rate=15.0) == 0.0  # one text per 67 ms: a wait would not pay


def test_a_model_whose_cost_is_all_per_text_never_waits_however_fast_work_comes():
    assert wait(queued(), rate=1e6, cost=PER_TEXT) == 0.0


def test_with_work_arriving_and_a_per_call_cost_the_wait_is_the_latency_optimum():
    # (a - b q)/2 - q/(2 λ) = (0.05 - 0.02)/2 - 4/800 = 10 ms; every bound is looser
    assert wait(queued(texts=4), rate=400.0) == pytest.approx(0.010)


def test_the_optimum_is_where_the_summed_latency_change_is_least():
    q, rate, a, b = 3, 300.0, ACCELERATOR.per_call_s, ACCELERATOR.per_text_s

    def change(w: float) -> float:  # the module docstring's D(w)
        return q * w + rate * w * w + rate * w * (b * q - a)

    grid = [i * 1e-5 for i in range(3000)]
    best = min(grid, key=change)
    assert wait(queued(texts=q), rate) == pytest.approx(best, abs=2e-5)


def test_the_more_is_queued_the_less_a_wait_pays():
    waits = [wait(queued(texts=q), rate=500.0) for q in range(1, 10)]
    assert waits == sorted(waits, reverse=True) and waits[0] > 0 and waits[-1] == 0


def test_a_full_batch_runs_at_once():
    assert wait(queued(texts=32), rate=1e6) == 0.0
    assert fixed_wait_s(NOW, queued(texts=32), 32, 0.002) == 0.0


def test_no_text_waits_longer_than_max_wait_from_the_oldest_arrival():
    assert wait(queued(age_s=0.0015), rate=1e4, max_wait=0.002) == pytest.approx(0.0005)
    assert wait(queued(age_s=0.003), rate=1e4, max_wait=0.002) == 0.0


def test_no_wait_past_the_time_the_batch_is_expected_to_fill():
    # 31 texts to go at 31,000 texts/s: 1 ms; the optimum alone would be about 22 ms
    assert wait(queued(), rate=31_000.0) == pytest.approx(0.001)


def test_the_earliest_deadline_bounds_the_wait_with_the_run_that_follows():
    rate = 1000.0
    # deadline in 60 ms; run of 1 text: 55 ms; each ms of waiting adds 1 text (5 ms):
    # w <= (60 - 55) / (1 + 5) ms
    w = wait(queued(deadline_in_s=0.060), rate)
    assert w == pytest.approx(0.005 / 6)
    assert wait(queued(deadline_in_s=0.050), rate) == 0.0  # cannot make it anyway


@given(
    texts=st.integers(1, 64),
    age=st.floats(0, 0.01),
    deadline_in=st.floats(0, 1),
    rate=st.floats(0, 1e6),
    per_call=st.floats(0, 0.1),
    per_text=st.floats(0, 0.02),
    max_wait=st.floats(0, 0.01),
)
def test_the_wait_keeps_every_bound(texts, age, deadline_in, rate, per_call, per_text, max_wait):
    q, cost = queued(texts, age, deadline_in), Cost(per_call, per_text)
    w = adaptive_wait_s(NOW, q, rate, cost, 32, max_wait)
    assert 0.0 <= w <= max(0.0, max_wait - age) + 1e-12
    if w > 0:
        assert texts < 32 and rate > 0 and per_call > per_text * texts
        expected = min(32, texts + rate * w)
        assert NOW + w + cost.seconds(expected) <= q.earliest_deadline + 1e-9
    assert not math.isnan(w)


def test_the_fixed_rule_waits_out_max_wait_from_the_oldest_arrival_whatever_comes():
    assert fixed_wait_s(NOW, queued(), 32, 0.002) == pytest.approx(0.002)
    assert fixed_wait_s(NOW, queued(age_s=0.0015), 32, 0.002) == pytest.approx(0.0005)
    assert fixed_wait_s(NOW, queued(age_s=0.003), 32, 0.002) == 0.0
