"""The two-sample statistics: MMD with its permutation test, KS, centroid drift."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from headway.quality.stats import (
    centroid_drift,
    kolmogorov_sf,
    ks_test,
    median_bandwidth,
    mmd2_rbf,
    mmd_test,
    row_norms,
)


def normal(seed: int, rows: int, dims: int, shift: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(rows, dims)) + shift).astype(np.float32)


def brute_mmd2(x: np.ndarray, y: np.ndarray, sigma: float) -> float:
    """Gretton et al. eq. 3, one pair at a time."""

    def k(a: np.ndarray, b: np.ndarray) -> float:
        return math.exp(-float(np.sum((a.astype(float) - b) ** 2)) / (2 * sigma * sigma))

    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(a, b) for a in x for b in y) / (m * n)
    return xx + yy - 2 * xy


def test_mmd2_matches_its_definition_pair_by_pair():
    x, y = normal(1, 7, 3), normal(2, 5, 3, shift=0.4)
    assert mmd2_rbf(x, y, 1.3) == pytest.approx(brute_mmd2(x, y, 1.3), rel=1e-9)


def test_the_median_bandwidth_is_the_median_pairwise_distance_of_the_pooled_rows():
    x, y = normal(3, 6, 4), normal(4, 5, 4)
    pooled = np.concatenate((x, y)).astype(float)
    pairs = [np.linalg.norm(a - b) for a, b in itertools.combinations(pooled, 2)]
    assert median_bandwidth(x, y) == pytest.approx(float(np.median(pairs)), rel=1e-9)


def test_the_median_bandwidth_of_identical_rows_falls_back_to_one():
    same = np.ones((4, 3), dtype=np.float32)
    assert median_bandwidth(same, same) == 1.0


def test_equal_rows_are_at_distance_zero_and_the_bandwidth_is_that_of_the_others():
    # Found by hypothesis: the Gram matrix's rounding noise between equal rows (~1e-9)
    # had become the median, and the MMD of (x, y) differed from that of (y, x).
    x, y = np.zeros((3, 4)), np.full((9, 4), 0.12)
    assert median_bandwidth(x, y) == pytest.approx(0.24)
    sigma = median_bandwidth(x, y)
    assert mmd2_rbf(x, y, sigma) == pytest.approx(mmd2_rbf(y, x, sigma), abs=1e-12)


def test_the_test_statistic_is_the_mmd2_at_the_median_bandwidth():
    x, y = normal(5, 40, 8), normal(6, 30, 8, shift=0.2)
    result = mmd_test(x, y, 50, np.random.default_rng(0))
    assert result.bandwidth == pytest.approx(median_bandwidth(x, y))
    assert result.statistic == pytest.approx(mmd2_rbf(x, y, result.bandwidth), rel=1e-9)


def test_a_sample_against_itself_has_an_mmd_near_zero_and_a_large_p_value():
    x = normal(7, 128, 16)
    result = mmd_test(x, x, 200, np.random.default_rng(1))
    assert abs(result.statistic) <= 2 / len(x)  # (2/m)(mean off-diagonal kernel − 1)
    assert result.p_value > 0.5


def test_two_samples_of_one_distribution_are_not_told_apart():
    result = mmd_test(normal(8, 256, 32), normal(9, 256, 32), 200, np.random.default_rng(2))
    assert result.p_value > 0.05
    assert abs(result.statistic) < 0.01


def test_a_shifted_distribution_is_told_apart_with_the_smallest_p_value():
    reference, window = normal(10, 128, 16), normal(11, 128, 16, shift=0.3)
    result = mmd_test(reference, window, 200, np.random.default_rng(3))
    assert result.p_value < 0.01
    assert result.p_value == pytest.approx(1 / 201)  # no permutation reached it
    assert result.statistic > 0.01


def test_the_p_value_is_a_count_of_permutations_over_permutations_plus_one():
    result = mmd_test(normal(12, 20, 3), normal(13, 20, 3), 37, np.random.default_rng(4))
    reached = result.p_value * 38 - 1
    assert reached == pytest.approx(round(reached)) and 0 <= round(reached) <= 37


def test_a_seeded_generator_gives_the_same_p_value():
    x, y = normal(14, 30, 4), normal(15, 30, 4, shift=0.1)
    first = mmd_test(x, y, 100, np.random.default_rng(99))
    again = mmd_test(x, y, 100, np.random.default_rng(99))
    assert first == again


def test_permutations_beyond_one_block_are_all_counted():
    x, y = normal(16, 10, 2), normal(17, 10, 2, shift=3.0)
    result = mmd_test(x, y, 600, np.random.default_rng(5))
    assert result.p_value == pytest.approx(1 / 601)


def test_mmd_needs_two_rows_a_side():
    with pytest.raises(ValueError, match="at least 2 rows"):
        mmd_test(normal(18, 1, 2), normal(19, 5, 2), 20, np.random.default_rng(0))
    with pytest.raises(ValueError, match="bandwidth"):
        mmd2_rbf(normal(18, 3, 2), normal(19, 3, 2), 0.0)


def test_the_ks_statistic_of_a_small_example_by_hand():
    # F₁ − F₂ at 4: 1 − 2/5 = 0.6, the largest gap.
    result = ks_test(np.array([1, 2, 3, 4.0]), np.array([3, 4, 5, 6, 7.0]))
    assert result.statistic == pytest.approx(0.6)
    root = math.sqrt(20 / 9)
    assert result.p_value == pytest.approx(kolmogorov_sf((root + 0.12 + 0.11 / root) * 0.6))


@pytest.mark.parametrize(
    ("lam", "survival"),
    [  # the Kolmogorov distribution's tail (scipy.special.kolmogorov, to 1e-12)
        (0.3, 0.9999906941986655),
        (0.5, 0.9639452436648751),
        (1.0, 0.26999967167735456),
        (1.17, 0.12939004218561884),
        (1.18, 0.1234538094297657),
        (1.358, 0.05002679733444698),  # the 5% critical value
        (1.628, 0.009975522431181053),  # the 1% critical value
        (3.0, 3.045995948942526e-08),
    ],
)
def test_the_kolmogorov_tail_matches_known_values(lam, survival):
    assert kolmogorov_sf(lam) == pytest.approx(survival, rel=1e-9, abs=1e-15)


def test_ks_tells_shifted_scores_apart_and_not_a_sample_from_itself():
    rng = np.random.default_rng(6)
    reference = rng.uniform(0, 1, 256)
    assert ks_test(reference, rng.uniform(0.2, 1, 256)).p_value < 0.01
    same = ks_test(reference, reference)
    assert same.statistic == 0.0 and same.p_value == 1.0


def test_ks_needs_a_score_a_side():
    with pytest.raises(ValueError, match="at least one score"):
        ks_test(np.array([]), np.array([0.5]))


def rotation(angle: float, dims: int) -> np.ndarray:
    turn = np.eye(dims)
    turn[:2, :2] = [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
    return turn


@pytest.mark.parametrize("angle", [0.0, math.pi / 6, math.pi / 2, math.pi])
def test_the_centroid_drift_of_rotated_rows_is_one_minus_the_cosine_of_the_angle(angle):
    rows = normal(20, 200, 6).astype(float) * 0.1
    rows -= rows.mean(axis=0)
    rows[:, 0] += 1.0  # the centroid is the first axis
    rotated = rows @ rotation(angle, 6).T
    assert centroid_drift(rows, rotated) == pytest.approx(1 - math.cos(angle), abs=1e-9)


def test_the_centroid_drift_of_zero_means():
    zero = np.zeros((3, 2))
    assert centroid_drift(zero, zero) == 0.0
    assert centroid_drift(zero, np.ones((3, 2))) == 1.0


def test_row_norms():
    assert row_norms(np.array([[3.0, 4.0], [0.0, 1.0]])).tolist() == [5.0, 1.0]


samples = st.integers(2, 8).flatmap(
    lambda dims: st.tuples(
        arrays(np.float64, st.tuples(st.integers(2, 9), st.just(dims)), elements=st.floats(-5, 5)),
        arrays(np.float64, st.tuples(st.integers(2, 9), st.just(dims)), elements=st.floats(-5, 5)),
    )
)


@given(samples, st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_the_p_value_is_in_0_1_and_the_mmd_is_symmetric(pair, seed):
    x, y = pair
    result = mmd_test(x, y, 20, np.random.default_rng(seed))
    assert 0.0 < result.p_value <= 1.0
    assert result.bandwidth > 0
    sigma = result.bandwidth  # equal up to rounding: the sums run in another order
    assert mmd2_rbf(x, y, sigma) == pytest.approx(mmd2_rbf(y, x, sigma), rel=1e-9, abs=1e-12)


@given(
    arrays(np.float64, st.integers(1, 30), elements=st.floats(-1, 1)),
    arrays(np.float64, st.integers(1, 30), elements=st.floats(-1, 1)),
)
@settings(max_examples=60, deadline=None)
def test_ks_is_symmetric_with_a_statistic_and_p_value_in_0_1(a, b):
    forward, backward = ks_test(a, b), ks_test(b, a)
    assert 0.0 <= forward.statistic <= 1.0 and 0.0 <= forward.p_value <= 1.0
    assert forward.statistic == pytest.approx(backward.statistic)
