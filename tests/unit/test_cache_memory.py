"""The memory tier: an LRU bounded in bytes, against a plain list model."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.cache.entry import Entry
from headway.cache.memory import MemoryCache


def key(name: int | str) -> bytes:
    return hashlib.sha256(str(name).encode()).digest()


def entry(floats: int = 4, tokens: int = 1) -> Entry:
    return Entry(values=b"\0" * (4 * floats), tokens=tokens)


SIZE = entry().size


def held(cache: MemoryCache, names: range | list[int]) -> list[int]:
    found = cache.get_many([key(n) for n in names])
    return [n for n, e in zip(names, found, strict=True) if e is not None]


def test_get_answers_in_order_with_none_for_misses() -> None:
    cache = MemoryCache(10 * SIZE)
    a, b = entry(tokens=1), entry(tokens=2)
    cache.put_many([(key(1), a), (key(2), b)])
    assert cache.get_many([key(2), key(3), key(1), key(2)]) == [b, None, a, b]
    assert cache.get_many([]) == []


def test_evicts_the_least_recently_used_to_stay_in_bound() -> None:
    cache = MemoryCache(3 * SIZE)
    cache.put_many([(key(n), entry()) for n in range(3)])
    assert (cache.entries, cache.bytes, cache.evictions) == (3, 3 * SIZE, 0)
    cache.put_many([(key(3), entry())])
    assert held(cache, range(4)) == [1, 2, 3]
    assert (cache.entries, cache.bytes, cache.evictions) == (3, 3 * SIZE, 1)


def test_one_byte_over_the_bound_is_over_it() -> None:
    cache = MemoryCache(2 * SIZE - 1)
    cache.put_many([(key(1), entry()), (key(2), entry())])
    assert held(cache, [1, 2]) == [2]
    assert (cache.bytes, cache.evictions) == (SIZE, 1)


def test_a_hit_makes_an_entry_the_most_recent() -> None:
    cache = MemoryCache(3 * SIZE)
    cache.put_many([(key(n), entry()) for n in range(3)])
    cache.get_many([key(0)])  # 1 is now the least recent
    cache.put_many([(key(3), entry())])
    assert held(cache, [0, 2, 3, 1]) == [0, 2, 3]


def test_a_big_entry_evicts_as_many_as_it_needs() -> None:
    cache = MemoryCache(4 * SIZE)
    cache.put_many([(key(n), entry()) for n in range(4)])
    big = entry(floats=4 + 2 * SIZE // 4)  # two small entries' worth more
    cache.put_many([(key("big"), big)])
    assert held(cache, range(4)) == [3]
    assert cache.bytes == SIZE + big.size <= cache.max_bytes
    assert cache.evictions == 3


def test_an_entry_over_the_whole_bound_is_not_stored_and_evicts_nothing() -> None:
    cache = MemoryCache(2 * SIZE)
    cache.put_many([(key(1), entry())])
    cache.put_many([(key(2), entry(floats=2 * SIZE))])
    assert held(cache, [1, 2]) == [1]
    assert (cache.bytes, cache.evictions) == (SIZE, 0)


def test_replacing_a_key_counts_its_size_once() -> None:
    cache = MemoryCache(10 * SIZE)
    cache.put_many([(key(1), entry(floats=4))])
    cache.put_many([(key(1), entry(floats=8)), (key(1), entry(floats=8))])
    assert (cache.entries, cache.bytes) == (1, entry(floats=8).size)


def test_zero_bytes_holds_nothing() -> None:
    cache = MemoryCache(0)
    cache.put_many([(key(1), entry())])
    assert cache.get_many([key(1)]) == [None]
    assert (cache.entries, cache.bytes, cache.evictions) == (0, 0, 0)


def test_clear_empties_it() -> None:
    cache = MemoryCache(10 * SIZE)
    cache.put_many([(key(n), entry()) for n in range(5)])
    cache.clear()
    assert (cache.entries, cache.bytes) == (0, 0)
    assert held(cache, range(5)) == []


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0 bytes"):
        MemoryCache(-1)


class ModelLru:
    """The obvious LRU: a list, least recent first, trimmed from the front."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.order: list[tuple[int, Entry]] = []
        self.evictions = 0

    def get(self, name: int) -> Entry | None:
        for index, (held_name, held_entry) in enumerate(self.order):
            if held_name == name:
                self.order.append(self.order.pop(index))
                return held_entry
        return None

    def put(self, name: int, value: Entry) -> None:
        self.order = [(n, e) for n, e in self.order if n != name]
        if value.size > self.max_bytes:
            return
        self.order.append((name, value))
        while sum(e.size for _, e in self.order) > self.max_bytes:
            self.order.pop(0)
            self.evictions += 1


operations = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.lists(st.integers(0, 9), max_size=4)),
        st.tuples(
            st.just("put"),
            st.lists(st.tuples(st.integers(0, 9), st.integers(0, 40)), max_size=4),
        ),
    ),
    max_size=60,
)


@given(max_bytes=st.integers(0, 6 * SIZE), steps=operations)
def test_agrees_with_the_model_and_never_exceeds_its_bound(
    max_bytes: int, steps: list[tuple[str, list[Any]]]
) -> None:
    cache, model = MemoryCache(max_bytes), ModelLru(max_bytes)
    for operation, arguments in steps:
        if operation == "get":
            found = cache.get_many([key(n) for n in arguments])
            assert found == [model.get(n) for n in arguments]
        else:
            items = [(n, entry(floats=floats, tokens=n)) for n, floats in arguments]
            cache.put_many([(key(n), e) for n, e in items])
            for n, e in items:
                model.put(n, e)
        assert cache.bytes <= max_bytes
        assert cache.bytes == sum(e.size for _, e in model.order)
        assert cache.entries == len(model.order)
        assert cache.evictions == model.evictions
    assert held(cache, range(10)) == sorted(n for n, _ in model.order)
