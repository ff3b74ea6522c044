from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.admission.estimate import Window, admission_limit, next_throughput


def window(completed, *, seconds=0.25, least=0, limit=100):
    return Window(seconds, completed, least, limit)


def test_a_higher_completion_rate_is_taken_at_once():
    assert next_throughput(50.0, window(50, least=60)) == 200.0
    assert next_throughput(50.0, window(50)) == 200.0


def test_windows_with_a_backlog_throughout_follow_a_capacity_loss_within_a_second():
    estimate = 400.0
    for _ in range(4):  # four 250 ms windows never below half the limit, 200 texts/s done
        estimate = next_throughput(estimate, window(50, least=50, limit=100))
    assert abs(estimate - 200) / 200 < 0.07


def test_a_window_busy_only_at_moments_does_not_lower_the_estimate():
    # a burst filled the limit (and was refused) but the backlog drained within the window:
    # what was completed is what arrived, not what the pool can do
    assert next_throughput(400.0, window(50, least=10, limit=100)) == 400.0


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
    w = window(completed, seconds=seconds, least=100 if busy else 0)
    rate = completed / seconds
    new = next_throughput(current, w)
    assert min(current, rate) - 1e-6 <= new <= max(current, rate) + 1e-6


def test_limit_is_littles_law_with_a_floor_and_an_override():
    assert admission_limit(300.0, 0.5, floor=64) == 150
    assert admission_limit(10.0, 0.5, floor=64) == 64
    assert admission_limit(300.0, 0.5, floor=64, static=20) == 20
