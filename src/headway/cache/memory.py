"""The in-process tier: an LRU of entries bounded in bytes.

An ``OrderedDict`` from key to entry, least recently used first. A hit moves its
key to the end; a put adds at the end and then drops from the front until the
entries' sizes (``Entry.size``) sum to at most ``max_bytes``. Invariant, after
every call: ``bytes <= max_bytes``, and ``bytes`` is the sum of the held entries'
sizes. An entry larger than the whole bound is not stored (it would evict
everything and then itself); ``max_bytes`` 0 holds nothing.

Synchronous and called on the event loop, so it is kept to dict operations. Measured
on the 2-core dev box (CPython 3.11, 2048 keys a call, 1.5 KiB rows): ``get_many``
0.1 µs a key, ``put_many`` 0.3 to 0.4 µs an entry, 1.0 µs when every put evicts;
making the key (``key.text_key``) costs more, 1.1 µs for a 50-character text.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from headway.cache.entry import Entry

Key = bytes
"""A 32-byte digest from ``key.py`` (an alias: ``bytes`` is a property name here)."""


class MemoryCache:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"the memory tier's bound must be >= 0 bytes, not {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._bytes = 0
        self._evictions = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def evictions(self) -> int:
        """Entries dropped to stay within the bound, since start."""
        return self._evictions

    def get_many(self, keys: Sequence[Key]) -> list[Entry | None]:
        """Each key's entry or ``None``, in order; every hit becomes the most recent."""
        held = self._entries
        refresh = held.move_to_end
        found: list[Entry | None] = []
        for key in keys:
            entry = held.get(key)
            if entry is not None:
                refresh(key)
            found.append(entry)
        return found

    def put_many(self, items: Iterable[tuple[Key, Entry]]) -> None:
        """Hold each entry as the most recent, evicting the least recent beyond the bound."""
        held = self._entries
        bound = self.max_bytes
        for key, entry in items:
            replaced = held.pop(key, None)
            if replaced is not None:
                self._bytes -= replaced.size
            size = entry.size
            if size > bound:
                continue
            held[key] = entry
            self._bytes += size
            while self._bytes > bound:
                _, evicted = held.popitem(last=False)
                self._bytes -= evicted.size
                self._evictions += 1

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
