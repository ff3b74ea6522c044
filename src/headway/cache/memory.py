"""The in-process tier: one LRU per scope, bounded in bytes each and all together.

A scope (a tenant, or tenants sharing entries: ``scopes.py``) is an ``OrderedDict``, least
recent first. A put into scope S adds at the end of S's, then (1) drops S's least recent entries
while S holds more than ``scope_bytes``, and (2) while all scopes hold more than ``max_bytes``,
drops the least recent entry of the scope holding the most: S if it holds at least as much as
every other, else the largest other (of equals, the first by name).

Invariants after every call: each scope holds at most ``scope_bytes`` and all at most
``max_bytes``, in ``Entry.size``. With n scopes holding entries, a scope holding at most
``max_bytes / n`` never loses an entry to another's puts, as step 2 takes from a scope holding
at least the total's n-th part; while fewer than ``max_bytes / scope_bytes`` scopes are full,
step 2 never runs, so eviction tells no tenant anything of another's traffic. An entry larger
than ``scope_bytes`` is not stored (it would evict the whole scope, then itself).

The largest scope is the top of a heap of (-bytes, name) items, one pushed on every change;
stale items are dropped at the top and the heap rebuilt once they outnumber the scopes. On the
event loop, so kept to dict operations (docs/benchmarks.md, "Figures the design rests on").
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from headway.cache.entry import Entry

Key = bytes
"""A 32-byte digest from ``key.py`` (an alias: ``bytes`` is a property name here)."""

_STALE_SLACK = 32
"""Stale heap items tolerated beyond one per scope before the heap is rebuilt."""


class _Scope:
    """One scope's LRU, least recent first, and the sum of its entries' sizes."""

    __slots__ = ("bytes", "entries")

    def __init__(self) -> None:
        self.entries: OrderedDict[Key, Entry] = OrderedDict()
        self.bytes = 0


class MemoryCache:
    def __init__(self, max_bytes: int, scope_bytes: int | None = None) -> None:
        """``scope_bytes`` None: a scope may fill the whole tier (it is capped at
        ``max_bytes`` in any case)."""
        if max_bytes < 0 or (scope_bytes is not None and scope_bytes < 0):
            raise ValueError(
                f"the memory tier's bounds must be >= 0 bytes, not {max_bytes}, {scope_bytes}"
            )
        self.max_bytes = max_bytes
        self.scope_bytes = max_bytes if scope_bytes is None else min(scope_bytes, max_bytes)
        self._scopes: dict[str, _Scope] = {}
        self._largest: list[tuple[int, str]] = []
        """(-bytes, name) items, a heap; see the module docstring."""
        self._bytes = 0
        self._evictions = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def entries(self) -> int:
        return sum(len(held.entries) for held in self._scopes.values())

    @property
    def scopes(self) -> int:
        """Scopes holding at least one entry."""
        return len(self._scopes)

    @property
    def evictions(self) -> int:
        """Entries dropped to stay within a bound, since start."""
        return self._evictions

    def scope_held(self, scope: str) -> int:
        """Bytes ``scope`` holds."""
        held = self._scopes.get(scope)
        return 0 if held is None else held.bytes

    def get_many(self, scope: str, keys: Sequence[Key]) -> list[Entry | None]:
        """Each key's entry in ``scope`` or ``None``, in order; every hit becomes its
        scope's most recent."""
        held = self._scopes.get(scope)
        if held is None:
            return [None] * len(keys)
        entries = held.entries
        refresh = entries.move_to_end
        found: list[Entry | None] = []
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                refresh(key)
            found.append(entry)
        return found

    def put_many(self, scope: str, items: Iterable[tuple[Key, Entry]]) -> None:
        """Hold each entry as ``scope``'s most recent, evicting as the module docstring says."""
        held = self._scopes.get(scope)
        if held is None:
            held = self._scopes[scope] = _Scope()
        entries = held.entries
        bound = self.scope_bytes
        for key, entry in items:
            replaced = entries.pop(key, None)
            if replaced is not None:
                held.bytes -= replaced.size
                self._bytes -= replaced.size
            size = entry.size
            if size > bound:
                continue
            entries[key] = entry
            held.bytes += size
            self._bytes += size
            while held.bytes > bound:
                self._drop_oldest(held)
            while self._bytes > self.max_bytes:
                other = self._largest_other(scope)
                if other is None or held.bytes >= other[1].bytes:
                    self._drop_oldest(held)
                else:
                    self._drop_oldest(other[1])
                    self._settle(*other)
        self._settle(scope, held)

    def drop_scope(self, scope: str) -> None:
        """Forget every entry of ``scope`` (not counted as evictions)."""
        held = self._scopes.pop(scope, None)
        if held is not None:
            self._bytes -= held.bytes

    def clear(self) -> None:
        self._scopes.clear()
        self._largest.clear()
        self._bytes = 0

    def _drop_oldest(self, held: _Scope) -> None:
        _, evicted = held.entries.popitem(last=False)
        held.bytes -= evicted.size
        self._bytes -= evicted.size
        self._evictions += 1

    def _largest_other(self, scope: str) -> tuple[str, _Scope] | None:
        """The scope other than ``scope`` holding the most bytes, if any.

        Drops the stale items on top, and ``scope``'s own (``put_many`` pushes it again
        when done), so every other scope keeps its current item.
        """
        heap = self._largest
        while heap:
            negative, name = heap[0]
            held = self._scopes.get(name)
            if name != scope and held is not None and held.bytes == -negative:
                return name, held
            heapq.heappop(heap)
        return None

    def _settle(self, scope: str, held: _Scope) -> None:
        """After ``scope``'s bytes changed: its current heap item, or gone if empty."""
        if not held.bytes:
            if self._scopes.get(scope) is held:
                del self._scopes[scope]
            return
        heap = self._largest
        heapq.heappush(heap, (-held.bytes, scope))
        if len(heap) > 2 * len(self._scopes) + _STALE_SLACK:
            self._largest = [(-kept.bytes, name) for name, kept in self._scopes.items()]
            heapq.heapify(self._largest)
