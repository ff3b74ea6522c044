"""Entry: its size in the memory tier and its encoding in Redis."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from headway.cache.entry import ENTRY_OVERHEAD_BYTES, KEY_BYTES, Entry, EntryCorrupt


def row(*values: float) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def test_encode_decode_round_trip() -> None:
    entry = Entry(values=row(0.25, -1.5, 3.0), tokens=300)
    data = entry.encode()
    assert data[:4] == struct.pack("<I", 300)
    assert data[4:] == entry.values
    back = Entry.decode(data)
    assert back == entry
    assert np.frombuffer(back.values, dtype="<f4").tolist() == [0.25, -1.5, 3.0]


def test_a_single_score_and_the_largest_token_count_round_trip() -> None:
    entry = Entry(values=row(0.75), tokens=(1 << 32) - 1)
    assert Entry.decode(entry.encode()) == entry


@pytest.mark.parametrize("length", [0, 3, 5, 6, 7, 9])
def test_decode_refuses_what_is_not_an_entry(length: int) -> None:
    with pytest.raises(EntryCorrupt, match=f"got {length} bytes"):
        Entry.decode(b"\x01" * length)


@pytest.mark.parametrize("tokens", [-1, 1 << 32])
def test_encode_refuses_tokens_beyond_32_bits(tokens: int) -> None:
    with pytest.raises(ValueError, match="32 bits"):
        Entry(values=row(1.0), tokens=tokens).encode()


def test_size_counts_values_key_and_overhead() -> None:
    entry = Entry(values=row(*range(384)), tokens=12)
    assert entry.size == 384 * 4 + KEY_BYTES + ENTRY_OVERHEAD_BYTES


def test_entries_are_frozen_and_slotted() -> None:
    entry = Entry(values=row(1.0), tokens=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.tokens = 2  # type: ignore[misc]
    assert not hasattr(entry, "__dict__")
