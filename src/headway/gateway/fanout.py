"""Splitting a request's texts into chunks, and merging results back in order.

Chunks are balanced (sizes differ by at most one) so that the parallel calls
finish together: 40 texts at chunk size 16 become 14 + 13 + 13, not 16 + 16 + 8.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def split(n_texts: int, chunk_texts: int) -> list[slice]:
    """Contiguous slices covering ``range(n_texts)`` in order, each at most ``chunk_texts``."""
    if n_texts <= 0:
        return []
    n_chunks = -(-n_texts // chunk_texts)
    base, extra = divmod(n_texts, n_chunks)
    slices = []
    start = 0
    for i in range(n_chunks):
        size = base + (1 if i < extra else 0)
        slices.append(slice(start, start + size))
        start += size
    return slices


def merge(parts: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """Concatenate per-chunk results, which arrive in chunk order."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
