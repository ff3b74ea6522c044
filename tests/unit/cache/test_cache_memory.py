"""The memory tier: an LRU per scope bounded in bytes, under a total bound shared fairly."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.cache.entry import Entry
from headway.cache.memory import MemoryCache

S = "tenant:acme"


def key(name: int | str) -> bytes:
    return hashlib.sha256(str(name).encode()).digest()


def entry(floats: int = 4, tokens: int = 1) -> Entry:
    return Entry(values=b"\0" * (4 * floats), tokens=tokens)


SIZE = entry().size


def held(cache: MemoryCache, names: range | list[int], scope: str = S) -> list[int]:
    found = cache.get_many(scope, [key(n) for n in names])
    return [n for n, e in zip(names, found, strict=True) if e is not None]


def fill(cache: MemoryCache, scope: str, names: range) -> None:
    cache.put_many(scope, [(key(n), entry()) for n in names])


# one scope: the plain LRU ---------------------------------------------------------------


def test_get_answers_in_order_with_none_for_misses() -> None:
    cache = MemoryCache(10 * SIZE)
    a, b = entry(tokens=1), entry(tokens=2)
    cache.put_many(S, [(key(1), a), (key(2), b)])
    assert cache.get_many(S, [key(2), key(3), key(1), key(2)]) == [b, None, a, b]
    assert cache.get_many(S, []) == []


def test_evicts_the_least_recently_used_to_stay_in_bound() -> None:
    cache = MemoryCache(3 * SIZE)
    fill(cache, S, range(3))
    assert (cache.entries, cache.bytes, cache.evictions) == (3, 3 * SIZE, 0)
    fill(cache, S, range(3, 4))
    assert held(cache, range(4)) == [1, 2, 3]
    assert (cache.entries, cache.bytes, cache.evictions) == (3, 3 * SIZE, 1)


def test_one_byte_over_the_bound_is_over_it() -> None:
    cache = MemoryCache(2 * SIZE - 1)
    fill(cache, S, range(1, 3))
    assert held(cache, [1, 2]) == [2]
    assert (cache.bytes, cache.evictions) == (SIZE, 1)


def test_a_hit_makes_an_entry_the_most_recent() -> None:
    cache = MemoryCache(3 * SIZE)
    fill(cache, S, range(3))
    cache.get_many(S, [key(0)])  # 1 is now the least recent
    fill(cache, S, range(3, 4))
    assert held(cache, [0, 2, 3, 1]) == [0, 2, 3]


def test_a_big_entry_evicts_as_many_as_it_needs() -> None:
    cache = MemoryCache(4 * SIZE)
    fill(cache, S, range(4))
    big = entry(floats=4 + 2 * SIZE // 4)  # two small entries' worth more
    cache.put_many(S, [(key("big"), big)])
    assert held(cache, range(4)) == [3]
    assert cache.bytes == SIZE + big.size <= cache.max_bytes
    assert cache.evictions == 3


def test_an_entry_over_the_scope_bound_is_not_stored_and_evicts_nothing() -> None:
    cache = MemoryCache(4 * SIZE, scope_bytes=2 * SIZE)
    fill(cache, S, range(1, 2))
    cache.put_many(S, [(key(2), entry(floats=2 * SIZE))])
    assert held(cache, [1, 2]) == [1]
    assert (cache.bytes, cache.evictions, cache.scopes) == (SIZE, 0, 1)


def test_replacing_a_key_counts_its_size_once() -> None:
    cache = MemoryCache(10 * SIZE)
    cache.put_many(S, [(key(1), entry(floats=4))])
    cache.put_many(S, [(key(1), entry(floats=8)), (key(1), entry(floats=8))])
    assert (cache.entries, cache.bytes) == (1, entry(floats=8).size)


def test_zero_bytes_holds_nothing() -> None:
    cache = MemoryCache(0)
    fill(cache, S, range(1, 2))
    assert cache.get_many(S, [key(1)]) == [None]
    assert (cache.entries, cache.bytes, cache.evictions, cache.scopes) == (0, 0, 0, 0)


def test_clear_empties_it() -> None:
    cache = MemoryCache(10 * SIZE)
    fill(cache, S, range(5))
    fill(cache, "tenant:other", range(5))
    cache.clear()
    assert (cache.entries, cache.bytes, cache.scopes) == (0, 0, 0)
    assert held(cache, range(5)) == []


@pytest.mark.parametrize(("max_bytes", "scope_bytes"), [(-1, None), (10, -1)])
def test_a_negative_bound_is_refused(max_bytes: int, scope_bytes: int | None) -> None:
    with pytest.raises(ValueError, match=">= 0 bytes"):
        MemoryCache(max_bytes, scope_bytes)


# scopes ---------------------------------------------------------------------------------


def test_a_scope_reads_only_its_own_entries() -> None:
    cache = MemoryCache(10 * SIZE)
    fill(cache, "tenant:a", range(2))
    assert held(cache, range(2), "tenant:b") == []
    assert held(cache, range(2), "tenant:a") == [0, 1]
    assert (cache.scopes, cache.scope_held("tenant:a"), cache.scope_held("tenant:b")) == (
        1,
        2 * SIZE,
        0,
    )


def test_a_scope_is_bounded_by_its_own_bound_whatever_room_is_left() -> None:
    cache = MemoryCache(10 * SIZE, scope_bytes=3 * SIZE)
    fill(cache, S, range(5))
    assert held(cache, range(5)) == [2, 3, 4]
    assert (cache.bytes, cache.evictions) == (3 * SIZE, 2)


def test_the_scope_bound_is_capped_by_the_total() -> None:
    assert MemoryCache(2 * SIZE, scope_bytes=5 * SIZE).scope_bytes == 2 * SIZE
    assert MemoryCache(2 * SIZE).scope_bytes == 2 * SIZE


def test_a_flood_within_the_scope_bounds_evicts_no_other_scope() -> None:
    """Two scopes whose bounds fit in the total: the attacker only ever evicts itself."""
    cache = MemoryCache(8 * SIZE, scope_bytes=4 * SIZE)
    fill(cache, "tenant:victim", range(4))
    fill(cache, "tenant:attacker", range(100, 1000))
    assert held(cache, range(4), "tenant:victim") == [0, 1, 2, 3]
    assert cache.scope_held("tenant:attacker") == 4 * SIZE
    assert cache.bytes == 8 * SIZE


def test_past_the_total_the_largest_scope_loses_first() -> None:
    cache = MemoryCache(6 * SIZE)  # a scope may take it all
    fill(cache, "tenant:victim", range(2))  # within its share (3 of 6, two scopes)
    fill(cache, "tenant:attacker", range(100, 1000))
    assert held(cache, range(2), "tenant:victim") == [0, 1]
    assert cache.scope_held("tenant:attacker") == 4 * SIZE
    assert cache.bytes == 6 * SIZE


def test_a_scope_above_its_share_loses_to_a_newcomer() -> None:
    cache = MemoryCache(4 * SIZE)
    fill(cache, "tenant:big", range(4))  # the whole tier, alone
    fill(cache, "tenant:new", range(100, 102))  # share is now 2 each
    assert held(cache, range(4), "tenant:big") == [2, 3]
    assert held(cache, range(100, 102), "tenant:new") == [100, 101]
    fill(cache, "tenant:new", range(102, 110))  # now each is at its share: it evicts itself
    assert held(cache, range(4), "tenant:big") == [2, 3]
    assert held(cache, range(100, 110), "tenant:new") == [108, 109]


def test_among_equal_scopes_the_one_putting_loses_first() -> None:
    cache = MemoryCache(4 * SIZE)
    fill(cache, "tenant:a", range(2))
    fill(cache, "tenant:b", range(2))
    fill(cache, "tenant:a", range(2, 3))
    assert held(cache, range(3), "tenant:a") == [1, 2]
    assert held(cache, range(2), "tenant:b") == [0, 1]


def test_drop_scope_forgets_that_scope_only() -> None:
    cache = MemoryCache(10 * SIZE)
    fill(cache, "tenant:a", range(3))
    fill(cache, "tenant:b", range(2))
    cache.drop_scope("tenant:a")
    cache.drop_scope("tenant:never")
    assert held(cache, range(3), "tenant:a") == []
    assert held(cache, range(2), "tenant:b") == [0, 1]
    assert (cache.bytes, cache.entries, cache.scopes, cache.evictions) == (2 * SIZE, 2, 1, 0)
    fill(cache, "tenant:a", range(1))  # the scope comes back empty
    assert held(cache, range(3), "tenant:a") == [0]


# the rules, against a model written the slow, obvious way --------------------------------


class ModelTier:
    """A list per scope, least recent first; the module docstring's two steps, recomputed."""

    def __init__(self, max_bytes: int, scope_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.scope_bytes = min(scope_bytes, max_bytes)
        self.order: dict[str, list[tuple[int, Entry]]] = {}
        self.evictions = 0

    def held(self, scope: str) -> int:
        return sum(e.size for _, e in self.order.get(scope, []))

    def total(self) -> int:
        return sum(self.held(scope) for scope in self.order)

    def get(self, scope: str, name: int) -> Entry | None:
        lru = self.order.get(scope, [])
        for index, (held_name, held_entry) in enumerate(lru):
            if held_name == name:
                lru.append(lru.pop(index))
                return held_entry
        return None

    def put(self, scope: str, name: int, value: Entry) -> None:
        lru = self.order[scope] = [(n, e) for n, e in self.order.get(scope, []) if n != name]
        if value.size <= self.scope_bytes:
            lru.append((name, value))
            while self.held(scope) > self.scope_bytes:
                self._drop(scope)
            while self.total() > self.max_bytes:
                others = [s for s, held in self.order.items() if s != scope and held]
                largest = min(others, key=lambda s: (-self.held(s), s), default=None)
                if largest is None or self.held(scope) >= self.held(largest):
                    self._drop(scope)
                else:
                    self._drop(largest)
        self.order = {s: held for s, held in self.order.items() if held}

    def _drop(self, scope: str) -> None:
        self.order[scope].pop(0)
        self.evictions += 1


SCOPES = ("tenant:a", "tenant:b", "tenant:c", "group:d", "tenant:e")
names = st.integers(0, 9)
scopes = st.sampled_from(SCOPES)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("get"), scopes, st.lists(names, max_size=4)),
        st.tuples(
            st.just("put"), scopes, st.lists(st.tuples(names, st.integers(0, 40)), max_size=4)
        ),
        st.tuples(st.just("drop"), scopes, st.just([])),
    ),
    max_size=150,
)


@settings(max_examples=300)
@given(max_bytes=st.integers(0, 12 * SIZE), scope_bytes=st.integers(0, 12 * SIZE), steps=operations)
def test_agrees_with_the_model_and_never_exceeds_its_bounds(
    max_bytes: int, scope_bytes: int, steps: list[tuple[str, str, list[Any]]]
) -> None:
    cache, model = MemoryCache(max_bytes, scope_bytes), ModelTier(max_bytes, scope_bytes)
    for operation, scope, arguments in steps:
        if operation == "get":
            found = cache.get_many(scope, [key(n) for n in arguments])
            assert found == [model.get(scope, n) for n in arguments]
        elif operation == "put":
            items = [(n, entry(floats=floats, tokens=n)) for n, floats in arguments]
            cache.put_many(scope, [(key(n), e) for n, e in items])
            for n, e in items:
                model.put(scope, n, e)
        else:
            cache.drop_scope(scope)
            model.order.pop(scope, None)
        assert cache.bytes <= max_bytes
        assert cache.bytes == model.total()
        for each in SCOPES:
            assert cache.scope_held(each) == model.held(each) <= cache.scope_bytes
        assert cache.scopes == len(model.order)
        assert cache.entries == sum(len(held) for held in model.order.values())
        assert cache.evictions == model.evictions
    for each in SCOPES:
        kept = sorted(n for n, _ in model.order.get(each, []))
        assert held(cache, range(10), each) == kept


puts = st.lists(
    st.tuples(scopes, st.lists(st.tuples(st.integers(0, 30), st.integers(0, 60)), max_size=6)),
    max_size=60,
)


@settings(max_examples=300)
@given(max_bytes=st.integers(0, 16 * SIZE), scope_bytes=st.integers(0, 16 * SIZE), steps=puts)
def test_a_scope_within_its_fair_share_never_loses_an_entry_to_another_scope(
    max_bytes: int, scope_bytes: int, steps: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    """Fair share: ``max_bytes`` over the scopes holding entries (the putting one counted)."""
    cache = MemoryCache(max_bytes, scope_bytes)
    stored: dict[str, set[int]] = {scope: set() for scope in SCOPES}
    for putter, items in steps:
        sharing = {s for s in SCOPES if cache.scope_held(s)} | {putter}
        within = [
            s
            for s in SCOPES
            if s != putter
            and cache.scope_held(s)
            and cache.scope_held(s) * len(sharing) <= max_bytes
        ]
        before = {s: set(held(cache, sorted(stored[s]), s)) for s in within}
        cache.put_many(putter, [(key(n), entry(floats=f)) for n, f in items])
        stored[putter] |= {n for n, _ in items}
        assert cache.bytes <= max_bytes
        for s in within:
            assert set(held(cache, sorted(stored[s]), s)) == before[s], s
