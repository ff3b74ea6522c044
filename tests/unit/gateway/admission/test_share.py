"""A gateway's share of its pool, and the floor scaled by it (estimate.py)."""

from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.admission.estimate import floor_texts, next_share


def test_the_first_sample_is_taken_whole_and_later_ones_smoothed():
    # three gateways, each completing a third of the pool's texts, then this one half
    share = next_share(None, own_completed=30, pool_completed=90, alpha=0.5)
    assert share == 30 / 90
    assert next_share(share, own_completed=45, pool_completed=90, alpha=0.5) == (1 / 3 + 0.5) / 2


def test_windows_where_this_gateway_or_the_pool_completed_nothing_keep_the_share():
    assert next_share(0.25, own_completed=0, pool_completed=90, alpha=0.5) == 0.25
    assert next_share(0.25, own_completed=10, pool_completed=0, alpha=0.5) == 0.25
    assert next_share(None, own_completed=10, pool_completed=0, alpha=0.5) is None


def test_a_sample_above_the_whole_pool_counts_as_all_of_it():
    # this gateway's requests finished in this window, the chunks' counters moved in the last
    assert next_share(None, own_completed=40, pool_completed=30, alpha=0.5) == 1.0


@given(
    st.one_of(st.none(), st.floats(0.01, 1.0)),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.floats(0.0, 1.0),
)
def test_the_share_stays_within_zero_and_one(current, own, pool, alpha):
    share = next_share(current, own, pool, alpha)
    assert share is None if current is None and not (own and pool) else 0.0 < share <= 1.0


def test_the_floor_is_per_ready_replica_times_the_share_and_never_zero():
    assert floor_texts(2, 32, 1.0) == 64  # one gateway: the floor as it always was
    assert floor_texts(2, 32, 1 / 3) == 22  # rounded up: three gateways hold 66, not 192
    assert floor_texts(0, 32, 1.0) == 32  # no replica ready yet: one replica's worth
    assert floor_texts(2, 32, 1e-6) == 1
