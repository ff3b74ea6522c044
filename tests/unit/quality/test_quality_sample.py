"""Sampling served rows: Bernoulli by geometric gaps; a reference, then a ring window."""

import numpy as np
import pytest

from headway.quality.sample import GAP_BLOCK, BernoulliSampler, VersionSample


class EveryTenth:
    """A generator whose geometric gaps are all 10, counting its draws."""

    def __init__(self) -> None:
        self.draws = 0

    def geometric(self, p, size=None):
        self.draws += 1
        return 10 if size is None else np.full(size, 10)


def test_gaps_become_positions_across_requests():
    sampler = BernoulliSampler(0.1, EveryTenth())
    assert sampler.pick(9) is None  # rows 0-8; the first taken is row 9
    assert sampler.pick(1).tolist() == [0]  # row 9
    assert sampler.pick(25).tolist() == [9, 19]  # rows 10-34: 19 and 29
    assert sampler.pick(4) is None  # rows 35-38
    assert sampler.pick(1).tolist() == [0]  # row 39


def test_a_request_none_of_whose_rows_is_taken_draws_nothing():
    rng = EveryTenth()
    sampler = BernoulliSampler(0.1, rng)
    before = rng.draws
    for _ in range(9):
        assert sampler.pick(1) is None
    assert rng.draws == before


def test_a_request_longer_than_the_drawn_gaps_draws_more():
    rng = EveryTenth()
    sampler = BernoulliSampler(0.1, rng)
    taken = sampler.pick(GAP_BLOCK * 10 * 3)
    assert taken.tolist() == list(range(9, GAP_BLOCK * 30, 10))
    assert rng.draws > 2


def test_every_row_is_taken_at_share_one():
    sampler = BernoulliSampler(1.0, np.random.default_rng(0))
    assert sampler.pick(3).tolist() == [0, 1, 2]
    assert sampler.pick(1000).tolist() == list(range(1000))


def test_the_share_taken_is_the_share_asked_for():
    sampler = BernoulliSampler(0.05, np.random.default_rng(1))
    sizes = np.random.default_rng(2).integers(1, 64, 4000)
    taken = 0
    for size in sizes.tolist():
        picked = sampler.pick(size)
        if picked is not None:
            assert picked.min() >= 0 and picked.max() < size
            assert np.all(np.diff(picked) > 0)
            taken += len(picked)
    total = int(sizes.sum())
    sd = (total * 0.05 * 0.95) ** 0.5
    assert abs(taken - total * 0.05) < 4 * sd


def test_the_share_must_be_a_probability():
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        BernoulliSampler(0.0, np.random.default_rng(0))


def rows(first: int, count: int, width: int = 2) -> np.ndarray:
    """Rows whose every value is their number: which rows a buffer holds is visible."""
    return np.repeat(np.arange(first, first + count, dtype=np.float32)[:, None], width, axis=1)


def every_row(reference_size: int = 4, window_size: int = 3) -> VersionSample:
    return VersionSample(
        2, reference_size, window_size, BernoulliSampler(1.0, np.random.default_rng(0))
    )


def test_the_reference_fills_first_then_the_window_keeps_the_newest():
    sample = every_row()
    assert sample.offer(rows(0, 3)) is not None
    assert (sample.reference_rows, sample.window_rows, sample.reference_full) == (3, 0, False)
    sample.offer(rows(3, 2))  # row 3 completes the reference, row 4 opens the window
    assert sample.reference_full and sample.reference()[:, 0].tolist() == [0, 1, 2, 3]
    assert sample.window()[:, 0].tolist() == [4]
    sample.offer(rows(5, 1))
    sample.offer(rows(6, 1))
    sample.offer(rows(7, 1))  # overwrites row 4
    assert sorted(sample.window()[:, 0].tolist()) == [5, 6, 7]
    sample.offer(rows(8, 5))  # more than the window: the last three
    assert sorted(sample.window()[:, 0].tolist()) == [10, 11, 12]
    assert sample.window_rows == 3 and sample.window_total == 9
    assert sample.reference()[:, 0].tolist() == [0, 1, 2, 3]  # never touched again


def test_an_adopted_reference_replaces_the_local_one_which_joins_the_window():
    sample = every_row(window_size=5)
    sample.offer(rows(0, 2))
    sample.adopt(rows(100, 6))
    assert sample.reference_full and sample.reference_rows == 6
    assert sample.reference()[:, 0].tolist() == list(range(100, 106))
    assert sorted(sample.window()[:, 0].tolist()) == [0, 1]
    sample.offer(rows(2, 1))
    assert sorted(sample.window()[:, 0].tolist()) == [0, 1, 2]


def test_rows_of_another_width_are_ignored_and_a_reference_of_one_refused():
    sample = every_row()
    assert sample.offer(rows(0, 2, width=3)) is None
    assert sample.reference_rows == 0
    with pytest.raises(ValueError, match="wide"):
        sample.adopt(rows(0, 4, width=3))


def test_the_copies_handed_out_do_not_change_with_the_sample():
    sample = every_row()
    sample.offer(rows(0, 5))
    window = sample.window()
    sample.offer(rows(5, 3))
    assert window[:, 0].tolist() == [4]
