"""One cached answer: a row of little-endian float32 and the tokens it cost.

``values`` is an embedding (``dimensions`` floats) or a single rerank score;
``tokens`` is what the model counted for it, so a cached answer reports (and can be
billed for) the same usage as a computed one.

``size`` is what an entry costs the memory tier, the unit of its bound: the value
bytes, the 32-byte key, and ``ENTRY_OVERHEAD_BYTES`` for the Python objects around
them: the key's and the value's ``bytes`` headers, the ``Entry``, a ``tokens`` int,
the dict slot and the ``OrderedDict`` link node. It bounds what ``tracemalloc``
measures for them (docs/benchmarks.md#figures-the-design-rests-on), so the tier never
holds more than its bound.

In Redis an entry is ``encode()``: tokens as 4 bytes little-endian, then ``values``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

KEY_BYTES = 32
"""Every key is a SHA-256 digest (``key.py``)."""
ENTRY_OVERHEAD_BYTES = 256
"""Python objects around one entry in the memory tier (measured, see above)."""

_TOKENS = struct.Struct("<I")
_MAX_TOKENS = (1 << 32) - 1


class EntryCorrupt(ValueError):
    """Bytes read back from the shared tier are not an encoded entry."""


@dataclass(frozen=True, slots=True)
class Entry:
    values: bytes
    tokens: int

    @property
    def size(self) -> int:
        """Bytes this entry costs the memory tier, key and overhead included."""
        return len(self.values) + KEY_BYTES + ENTRY_OVERHEAD_BYTES

    def encode(self) -> bytes:
        if not 0 <= self.tokens <= _MAX_TOKENS:
            raise ValueError(f"an entry's tokens must fit in 32 bits, not {self.tokens}")
        return _TOKENS.pack(self.tokens) + self.values

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        if len(data) < _TOKENS.size or (len(data) - _TOKENS.size) % 4:
            raise EntryCorrupt(
                f"a cache entry is 4 bytes of tokens and whole float32s; got {len(data)} bytes"
            )
        (tokens,) = _TOKENS.unpack_from(data)
        return cls(values=data[_TOKENS.size :], tokens=tokens)
