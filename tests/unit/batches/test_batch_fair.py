"""Round robin across tenants (``batches/fair.py``): pure, so fed lists directly."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from headway.batches.fair import rotation, round_robin


def test_the_rotation_starts_after_the_tenant_served_last_and_wraps_round() -> None:
    assert rotation(["c", "a", "b"], None) == ["a", "b", "c"]
    assert rotation(["c", "a", "b"], "a") == ["b", "c", "a"]
    assert rotation(["c", "a", "b"], "c") == ["a", "b", "c"]
    assert rotation(["a", "c"], "b") == ["c", "a"]  # the last one served has none left


def test_one_item_each_per_round_until_the_pull_is_full() -> None:
    assert round_robin([("big", 1_000_000), ("small", 1)], 4) == ["big", "small", "big", "big"]
    assert round_robin([("a", 2), ("b", 0), ("c", 3)], 10) == ["a", "c", "a", "c", "c"]
    assert round_robin([("a", 5), ("b", 5)], 1) == ["a"]
    assert round_robin([], 5) == []


@given(
    st.lists(st.integers(min_value=0, max_value=50), max_size=12),
    st.integers(min_value=0, max_value=200),
)
def test_no_tenant_gets_more_than_it_offered_nor_two_more_than_another(
    counts: list[int], total: int
) -> None:
    offers = [(f"t{i}", n) for i, n in enumerate(counts)]
    order = round_robin(offers, total)
    given_ = Counter(order)
    assert len(order) == min(total, sum(counts))
    assert all(given_[key] <= n for key, n in offers)
    # Of the tenants that could have given more, none is more than one item behind another.
    short = [given_[key] for key, n in offers if given_[key] < n]
    if short:
        assert max(given_.values(), default=0) - min(short) <= 1
