import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.schedule import Schedule, Step

steps_st = st.lists(
    st.builds(
        Step,
        seconds=st.floats(min_value=0.01, max_value=5),
        rps=st.one_of(st.just(0.0), st.floats(min_value=0.1, max_value=500)),
    ),
    min_size=1,
    max_size=4,
)


def test_fixed_spacing_gives_rate_times_duration_evenly_spaced():
    offsets = list(Schedule((Step(10, 200),)).offsets())
    assert len(offsets) == 2000
    assert offsets[0] == 0
    gaps = {round(b - a, 9) for a, b in itertools.pairwise(offsets)}
    assert gaps == {0.005}


def test_fixed_count_rounds_a_fractional_step_up_and_never_gains_one_from_float_error():
    assert len(list(Schedule((Step(1, 2.5),)).offsets())) == 3  # at 0, 0.4, 0.8
    assert len(list(Schedule((Step(0.3, 10),)).offsets())) == 3  # 0.3 × 10 is 3.0000000000000004


@given(steps_st, st.sampled_from(["fixed", "poisson"]), st.integers(0, 2**32))
def test_offsets_are_ordered_and_inside_the_schedule(steps, arrivals, seed):
    schedule = Schedule(tuple(steps), arrivals=arrivals, seed=seed)
    offsets = list(schedule.offsets())
    assert offsets == sorted(offsets)
    assert all(0 <= t < schedule.duration_s for t in offsets)
    if arrivals == "fixed":
        assert len(offsets) == sum(math.ceil(s.seconds * s.rps - 1e-9) for s in steps)


def test_poisson_count_and_gaps_match_the_rate():
    offsets = list(Schedule((Step(100, 100),), arrivals="poisson", seed=7).offsets())
    # Count ~ Poisson(10,000): sd 100; 4 sd is a loose, seed-independent bound.
    assert abs(len(offsets) - 10_000) < 400
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(0.01, rel=0.04)
    # Exponential gaps: sd equals the mean (fixed spacing would have sd 0).
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert sd == pytest.approx(mean, rel=0.08)


def test_poisson_is_deterministic_for_a_seed():
    def offsets(seed: int) -> list[float]:
        return list(Schedule((Step(2, 300),), arrivals="poisson", seed=seed).offsets())

    assert offsets(1) == offsets(1)
    assert offsets(1) != offsets(2)


def test_fixed_steps_concatenate():
    a, b = Step(1.5, 40), Step(2, 10)
    joined = list(Schedule((a, b)).offsets())
    first = list(Schedule((a,)).offsets())
    second = [1.5 + t for t in Schedule((b,)).offsets()]
    assert joined == pytest.approx(first + second)


def test_poisson_steps_concatenate_with_each_steps_rate():
    schedule = Schedule((Step(20, 50), Step(20, 200)), arrivals="poisson", seed=3)
    offsets = list(schedule.offsets())
    in_first = sum(1 for t in offsets if t < 20)
    assert abs(in_first - 1000) < 4 * math.sqrt(1000)
    assert abs((len(offsets) - in_first) - 4000) < 4 * math.sqrt(4000)


def test_a_zero_rate_step_is_a_pause():
    offsets = list(Schedule((Step(1, 10), Step(2, 0), Step(1, 10))).offsets())
    assert len(offsets) == 20
    assert not [t for t in offsets if 1 <= t < 3]
    assert Schedule((Step(1, 10), Step(2, 0))).duration_s == 3


@pytest.mark.parametrize(
    ("seconds", "rps"), [(0, 1), (-1, 1), (1, -1), (math.inf, 1), (1, math.nan)]
)
def test_bad_steps_are_rejected(seconds, rps):
    with pytest.raises(InvalidSpec):
        Step(seconds, rps)


def test_a_schedule_needs_steps_and_known_arrivals():
    with pytest.raises(InvalidSpec, match="at least one step"):
        Schedule(())
    with pytest.raises(InvalidSpec, match="arrivals"):
        Schedule((Step(1, 1),), arrivals="bursty")  # type: ignore[arg-type]
