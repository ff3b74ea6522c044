from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.quantile import quantile

samples_st = st.lists(
    st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300
)
share_st = st.floats(min_value=0, max_value=1)


def test_nearest_rank_of_one_to_a_hundred_in_any_order():
    samples = list(range(100, 0, -1))
    assert [quantile(samples, q) for q in (0, 0.5, 0.95, 0.99, 0.995, 1)] == [
        1,
        50,
        95,
        99,
        100,
        100,
    ]


def test_a_share_is_read_as_the_decimal_it_prints_as():
    # 0.07 * 100 is 7.000000000000001 in binary floating point: its ceiling would be 8.
    assert quantile(range(1, 101), 0.07) == 7
    assert quantile(range(1, 11), 0.3) == 3


def test_few_samples_and_arrays():
    assert quantile([3.0, 1.0, 2.0], 0.99) == 3.0
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile(np.array([7.0]), 0.99) == 7.0
    assert isinstance(quantile(np.array([1.0, 2.0]), 0.5), float)


@pytest.mark.parametrize(
    ("samples", "q", "problem"),
    [([], 0.5, "no samples"), ([1.0], -0.01, "outside"), ([1.0], 1.5, "outside")],
)
def test_no_samples_or_a_share_outside_zero_to_one_is_refused(samples, q, problem):
    with pytest.raises(ValueError, match=problem):
        quantile(samples, q)


def test_a_table_is_refused():
    with pytest.raises(ValueError, match="2-dimensional"):
        quantile(np.ones((2, 2)), 0.5)


@given(samples_st, share_st)
def test_the_quantile_is_a_sample_with_at_least_its_share_at_or_below_it(samples, q):
    value = quantile(samples, q)
    share = Fraction(str(q)) * len(samples)
    assert value in samples
    assert sum(s <= value for s in samples) >= share
    assert sum(s < value for s in samples) < max(share, 1)


@given(samples_st, share_st, share_st)
def test_the_quantile_never_decreases_with_its_share(samples, q1, q2):
    low, high = sorted((q1, q2))
    assert quantile(samples, low) <= quantile(samples, high)


@given(samples_st, share_st)
def test_a_list_and_an_array_of_the_same_samples_agree(samples, q):
    assert quantile(samples, q) == quantile(np.array(samples), q)
