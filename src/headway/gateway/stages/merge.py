"""Putting the chunks' results back together, in the request's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def merge(results: Sequence[wire.ChunkResult]) -> Merged:
    """Concatenate per-chunk results, which arrive in chunk order."""
    parts = [result.array() for result in results]
    values = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    return Merged(
        values,
        sum(result.tokens for result in results),
        max(result.queue_s for result in results),
        max(result.inference_s for result in results),
    )
