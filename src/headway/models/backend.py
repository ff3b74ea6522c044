"""The seam between the worker and whatever computes: one small protocol.

A backend turns texts into token ids (``encode_*``, cheap, called on the event
loop so the batcher can budget by tokens) and runs one padded batch
(``run``, expensive, called only from the worker's single inference thread).

- ``embedding`` backends return one L2-normalised row per encoded text.
- ``cross-encoder`` backends return one relevance score in [0, 1] per encoded
  (query, document) pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from headway.wire import Token, Truncation

ModelKind = Literal["embedding", "cross-encoder"]


@dataclass(frozen=True, slots=True)
class Encoded:
    """Token ids of one text (or one query/document pair), unpadded."""

    ids: tuple[int, ...]
    type_ids: tuple[int, ...] | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.ids)


class Backend(Protocol):
    """A loaded model; ``run`` is only ever called from one thread."""

    @property
    def kind(self) -> ModelKind: ...

    @property
    def dimensions(self) -> int:
        """Width of an embedding row (1 for a cross-encoder)."""
        ...

    @property
    def call_overhead_tokens(self) -> int:
        """The fixed cost of one model call, in padded tokens' worth of compute.

        The batcher splits a batch into calls of similar length when the padding
        saved outweighs this (see ``worker.planning``).
        """
        ...

    def encode_texts(self, texts: Sequence[str], truncation: Truncation = "right") -> list[Encoded]:
        """``InputRefused`` for a text over the limit when ``truncation`` is ``none``."""
        ...

    def encode_pairs(
        self, query: str, documents: Sequence[str], truncation: Truncation = "right"
    ) -> list[Encoded]: ...

    def tokens(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[Token]]:
        """Each text's tokens, untruncated, with where each lies in the text."""
        ...

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]: ...

    def run(self, batch: Sequence[Encoded]) -> npt.NDArray[np.float32]:
        """Embeddings ``[n, dimensions]`` or scores ``[n]`` for one batch."""
        ...
