"""The console's pool history: bounded, time-windowed, shed rate from the totals."""

from __future__ import annotations

import pytest

from headway.control.console.history import PoolHistory, PoolSample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sample(outstanding: int = 0, shed: float = 0.0, limit: int = 64) -> PoolSample:
    return PoolSample(limit, outstanding, 100.0, shed, 2)


def test_points_are_oldest_first_with_their_age_and_shed_rate():
    clock = Clock()
    history = PoolHistory(lambda: {}, clock, window_s=10, interval_s=1)
    for second, (outstanding, shed) in enumerate([(0, 0), (5, 0), (9, 4), (3, 10)]):
        history.record(1000.0 + second, {"embed": sample(outstanding, shed)})
    clock.now = 1003.0
    points = history.points("embed")
    assert [p.ago_s for p in points] == [-3.0, -2.0, -1.0, 0.0]
    assert [p.outstanding for p in points] == [0, 5, 9, 3]
    assert [p.shed_per_s for p in points] == [0.0, 0.0, 4.0, 6.0]
    assert history.points("rerank") == []


def test_it_keeps_only_the_window_and_stays_bounded_however_long_it_runs():
    clock = Clock()
    history = PoolHistory(lambda: {}, clock, window_s=10, interval_s=1)
    for second in range(1000):
        clock.now = 1000.0 + second
        history.record(clock.now, {"embed": sample(second)})
    points = history.points("embed")
    assert len(points) == 11
    assert points[0].ago_s == -10.0 and points[-1].outstanding == 999
    # sampled too often: the deque's bound still holds
    for k in range(100):
        history.record(clock.now + k / 1000, {"embed": sample()})
    assert len(history.points("embed", now=clock.now + 0.1)) <= 11


def test_the_rate_of_the_first_point_in_the_window_uses_the_sample_before_it():
    clock = Clock()
    history = PoolHistory(lambda: {}, clock, window_s=5, interval_s=1)
    history.record(1000.0, {"embed": sample(shed=0)})
    history.record(1002.0, {"embed": sample(shed=10)})
    points = history.points("embed", now=1006.0)  # the first sample is out of the window
    assert [p.shed_per_s for p in points] == [5.0]


def test_a_total_that_goes_down_reads_as_no_shedding():
    clock = Clock()
    history = PoolHistory(lambda: {}, clock, window_s=10, interval_s=1)
    history.record(1000.0, {"embed": sample(shed=10)})
    history.record(1001.0, {"embed": sample(shed=2)})
    assert [p.shed_per_s for p in history.points("embed", now=1001.0)] == [0.0, 0.0]


async def test_sample_reads_every_pool_at_the_clocks_time():
    clock = Clock()
    reads = iter([{"embed": sample(1), "rerank": sample(2)}, {"embed": sample(3)}])
    history = PoolHistory(lambda: next(reads), clock, window_s=60, interval_s=1)
    await history.sample()
    clock.now += 1
    await history.sample()
    assert [p.outstanding for p in history.points("embed")] == [1, 3]
    assert [(p.ago_s, p.outstanding) for p in history.points("rerank")] == [(-1.0, 2)]


@pytest.mark.parametrize(("window_s", "interval_s", "size"), [(600, 1, 601), (10, 3, 5)])
def test_the_bound_is_the_window_over_the_interval(window_s, interval_s, size):
    history = PoolHistory(lambda: {}, Clock(), window_s=window_s, interval_s=interval_s)
    for k in range(size * 3):
        history.record(1000.0, {"embed": sample(k)})  # all at one instant: only the bound trims
    assert len(history.points("embed", now=1000.0)) == size
