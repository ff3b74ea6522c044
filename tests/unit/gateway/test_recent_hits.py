"""RecentHits: per-tenant whole-hit marks within a window, in bounded memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.gateway.stages.recent_hits import RecentHits


def test_a_mark_lasts_the_window_and_no_longer() -> None:
    hits = RecentHits(window_s=1.0)
    hits.mark("a", now=10.0)
    assert hits.recent("a", now=10.0) and hits.recent("a", now=10.999)
    assert not hits.recent("a", now=11.0)


def test_one_tenants_mark_says_nothing_of_another() -> None:
    hits = RecentHits(window_s=1.0)
    for second in range(100):  # a hostile tenant repeating one text every second
        hits.mark("hostile", now=float(second))
        assert not hits.recent("victim", now=second + 0.5)
    assert hits.recent("hostile", now=99.5)


def test_marks_past_the_window_are_dropped_as_others_arrive() -> None:
    hits = RecentHits(window_s=1.0)
    hits.mark("a", now=0.0)
    hits.mark("b", now=0.5)
    hits.mark("c", now=1.2)  # a's mark is a second old
    assert len(hits) == 2
    assert not hits.recent("a", now=1.2) and hits.recent("b", now=1.2)


def test_past_capacity_the_oldest_mark_goes_and_reads_as_none() -> None:
    hits = RecentHits(window_s=10.0, capacity=2)
    hits.mark("a", now=0.0)
    hits.mark("b", now=0.1)
    hits.mark("a", now=0.2)  # a is now the newest
    hits.mark("c", now=0.3)
    assert len(hits) == 2
    assert [hits.recent(t, now=0.4) for t in "abc"] == [True, False, True]


def test_forget_drops_a_tenant() -> None:
    hits = RecentHits(window_s=1.0)
    hits.mark("a", now=0.0)
    hits.forget("a")
    hits.forget("never")
    assert not hits.recent("a", now=0.1) and len(hits) == 0


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentHits(window_s=1.0, capacity=0)


@given(
    capacity=st.integers(1, 5),
    marks=st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 0.6, allow_nan=False)), max_size=60
    ),
)
def test_never_holds_more_than_capacity_and_a_recent_mark_is_true_when_kept(
    capacity: int, marks: list[tuple[str, float]]
) -> None:
    hits, now, last = RecentHits(window_s=1.0, capacity=capacity), 0.0, {}
    for tenant, step in marks:
        now += step
        hits.mark(tenant, now)
        last[tenant] = now
        assert len(hits) <= capacity
        assert hits.recent(tenant, now)  # the newest mark is never the one dropped
        for other, at in last.items():
            if now - at >= 1.0:
                assert not hits.recent(other, now)
