from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.admission.estimate import Window, admission_limit, next_throughput


def window(completed, *, seconds=0.25, refused=0, peak=0, limit=100):
    return Window(seconds, completed, refused, peak, limit)


def test_a_higher_completion_rate_is_taken_at_once():
    assert next_throughput(50.0, window(50, refused=3)) == 200.0
    assert next_throughput(50.0, window(50)) == 200.0


def test_saturated_windows_follow_a_capacity_loss_within_a_second():
    estimate = 400.0
    for _ in range(4):  # four 250 ms windows refusing work while completing 200 texts/s
        estimate = next_throughput(estimate, window(50, refused=3))
    assert abs(estimate - 200) / 200 < 0.07


def test_capacity_loss_is_followed_down_when_the_limit_fills():
    estimate = 200.0
    for _ in range(8):
        estimate = next_throughput(estimate, window(25, peak=60, limit=100))  # 100 texts/s
    assert 99 < estimate < 101


def test_idle_windows_never_lower_the_estimate_but_may_raise_it():
    assert next_throughput(200.0, window(5)) == 200.0
    assert next_throughput(10.0, window(25)) == 100.0


@given(
    st.floats(min_value=0, max_value=1e5),
    st.integers(min_value=0, max_value=10_000),
    st.floats(min_value=0.01, max_value=10),
    st.booleans(),
)
def test_estimate_stays_between_old_value_and_observed_rate(current, completed, seconds, busy):
    w = window(completed, seconds=seconds, refused=int(busy))
    rate = completed / seconds
    new = next_throughput(current, w)
    assert min(current, rate) - 1e-6 <= new <= max(current, rate) + 1e-6


def test_limit_is_littles_law_with_a_floor_and_an_override():
    assert admission_limit(300.0, 0.5, floor=64) == 150
    assert admission_limit(10.0, 0.5, floor=64) == 64
    assert admission_limit(300.0, 0.5, floor=64, static=20) == 20
