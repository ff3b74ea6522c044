"""Putting the chunks' results back together, in the request's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from headway import wire


@dataclass(slots=True)
class Merged:
    values: npt.NDArray[np.float32]
    """One row per text (embeddings ``[n, dimensions]``, scores ``[n]``), in request order."""
    tokens: int
    """Real tokens the model read, over every chunk."""
    queue_s: float
    """The longest any chunk waited in a worker's queue."""
    inference_s: float
    """The longest any chunk's batch ran."""
    row_tokens: npt.NDArray[np.uint32] = field(default_factory=lambda: _NO_ROW_TOKENS)
    """Tokens per row, where the workers said (embeddings): for the results cache."""


_NO_ROW_TOKENS: npt.NDArray[np.uint32] = np.zeros(0, dtype=np.uint32)


def merge(results: Sequence[wire.ChunkResult]) -> Merged:
    """Concatenate per-chunk results, which arrive in chunk order."""
    parts = [result.array() for result in results]
    values = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    row_tokens = b"".join(result.row_tokens for result in results)
    return Merged(
        values,
        sum(result.tokens for result in results),
        max(result.queue_s for result in results),
        max(result.inference_s for result in results),
        np.frombuffer(row_tokens, dtype="<u4") if row_tokens else _NO_ROW_TOKENS,
    )
