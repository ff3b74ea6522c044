"""The batcher's arrival-rate and cost estimates (worker/estimates.py), on made-up samples."""

import pytest

from headway.worker.estimates import ArrivalRate, CostFit
from headway.worker.fill import Cost


def test_no_rate_until_two_chunks_have_arrived():
    rate = ArrivalRate()
    assert rate.texts_per_s == 0.0
    rate.observe(10.0, 4)
    assert rate.texts_per_s == 0.0
    rate.observe(10.1, 4)
    assert rate.texts_per_s == pytest.approx(40.0)


def test_a_steady_stream_gives_its_rate_in_texts():
    rate = ArrivalRate()
    for i in range(20):
        rate.observe(i * 0.010, 2)  # 2 texts every 10 ms
    assert rate.texts_per_s == pytest.approx(200.0)


def test_the_rate_follows_a_burst_within_a_few_arrivals():
    rate = ArrivalRate()
    for i in range(10):
        rate.observe(i * 0.055, 1)  # one text per 55 ms call: about 18/s
    assert rate.texts_per_s < 20
    for i in range(1, 4):
        rate.observe(9 * 0.055 + i * 0.0002, 1)  # then three 0.2 ms apart
    assert rate.texts_per_s > 100


def test_chunks_read_in_one_clock_tick_give_a_large_finite_rate():
    rate = ArrivalRate()
    rate.observe(5.0, 1)
    rate.observe(5.0, 1)
    assert 1e5 < rate.texts_per_s < float("inf")


def test_before_any_batch_the_cost_is_zero():
    assert CostFit().cost == Cost()


def test_the_per_call_and_per_text_parts_are_recovered_from_two_sizes():
    fit = CostFit()
    for texts in (8, 1, 1, 8, 1, 4, 1):
        fit.observe(texts, 0.050 + 0.005 * texts)
    assert fit.cost.per_call_s == pytest.approx(0.050)
    assert fit.cost.per_text_s == pytest.approx(0.005)


def test_one_size_alone_cannot_tell_the_parts_apart_so_it_counts_as_per_text():
    fit = CostFit()
    for _ in range(5):
        fit.observe(1, 0.055)
    assert fit.cost == Cost(0.0, pytest.approx(0.055))


def test_the_fit_follows_a_model_that_changes():
    fit = CostFit()
    for _ in range(5):
        for texts in (1, 8):
            fit.observe(texts, 0.050 + 0.005 * texts)
    for _ in range(60):
        for texts in (1, 8):
            fit.observe(texts, 0.010 * texts)  # now all per text
    assert fit.cost.per_call_s == pytest.approx(0.0, abs=1e-4)
    assert fit.cost.per_text_s == pytest.approx(0.010, rel=0.01)


def test_neither_part_is_ever_negative():
    fit = CostFit()
    for texts, seconds in ((1, 0.020), (8, 0.010), (1, 0.020), (8, 0.010)):  # bigger, faster
        fit.observe(texts, seconds)
    assert fit.cost.per_text_s == 0.0 and fit.cost.per_call_s > 0
    fit = CostFit()
    for texts, seconds in ((1, 0.001), (8, 0.080), (1, 0.001), (8, 0.080)):  # steeper than linear
        fit.observe(texts, seconds)
    assert fit.cost.per_call_s == 0.0 and fit.cost.per_text_s > 0
