"""A backend whose cost is waiting, not computing: an accelerator-like model.

A call sleeps ``call_ms + text_ms * n``, so batching, replicas and overload show on a small
machine; a seeded share of calls (``hiccup_share``) takes ``hiccup_ms`` longer, and another
(``fail_share``) raises, failing its batch's chunks. A text's embedding is a unit vector
seeded by its token ids and ``seed``: the same row wherever the model is served, and
another seed is another model.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from headway.errors import HeadwayError
from headway.models.backend import Encoded, ModelKind
from headway.wire import Token, Truncation

VOCAB = 30_000


def _token_id(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % VOCAB


class InjectedFailure(HeadwayError):
    """A synthetic model call failed on purpose (``fail_share``)."""

    quiet = True  # a scale test asks for many; one log line each would drown the rest


class SyntheticBackend:
    def __init__(
        self,
        *,
        call_ms: float = 50.0,
        text_ms: float = 5.0,
        dimensions: int = 384,
        hiccup_share: float = 0.0,
        hiccup_ms: float = 0.0,
        seed: int = 0,
        fail_share: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._call_s = call_ms / 1000
        self._text_s = text_ms / 1000
        self._hiccup_share = hiccup_share
        self._hiccup_s = hiccup_ms / 1000
        self._rng = random.Random(0)  # the same hiccups every run
        self._seed = seed
        self._fail_share = fail_share
        # The same failures every run; not Random(0), whose first 25 draws are all >= 0.25
        # (a 20% failure share would fail nothing for its first 25 calls).
        self._failures = random.Random(f"failures:{seed}")
        self._dimensions = dimensions
        self._sleep = sleep

    @property
    def kind(self) -> ModelKind:
        return "embedding"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def call_overhead_tokens(self) -> int:
        """Cost is per call and per text, never per padded token: never split a batch."""
        return 1 << 30

    def encode_texts(self, texts: Sequence[str], truncation: Truncation = "right") -> list[Encoded]:
        """Whitespace words, no limit (so ``truncation`` never matters)."""
        return [Encoded((101, *(_token_id(w) for w in text.split()), 102)) for text in texts]

    def encode_pairs(
        self, query: str, documents: Sequence[str], truncation: Truncation = "right"
    ) -> list[Encoded]:
        raise NotImplementedError("the synthetic backend is an embedding model")

    def tokens(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[Token]]:
        """Each whitespace word one token, between ``[CLS]`` and ``[SEP]`` if asked."""
        answer = []
        for text in texts:
            words: list[Token] = []
            at = 0
            for word in text.split():
                start = text.index(word, at)
                at = start + len(word)
                words.append(Token(_token_id(word), word, False, start, at))
            if add_special_tokens:
                words = [Token(101, "[CLS]", True, None, None), *words]
                words.append(Token(102, "[SEP]", True, None, None))
            answer.append(words)
        return answer

    def decode(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool) -> list[str]:
        """Ids are hashes of words here: they decode to the ids themselves, as text."""
        special = {101, 102}
        return [
            " ".join(str(i) for i in row if not (skip_special_tokens and i in special))
            for row in ids
        ]

    def run(self, batch: Sequence[Encoded]) -> npt.NDArray[np.float32]:
        hiccup = self._hiccup_s if self._rng.random() < self._hiccup_share else 0.0
        self._sleep(self._call_s + self._text_s * len(batch) + hiccup)
        if self._fail_share and self._failures.random() < self._fail_share:
            raise InjectedFailure(f"synthetic model call failed (fail_share={self._fail_share})")
        out = np.empty((len(batch), self._dimensions), dtype=np.float32)
        for row, item in enumerate(batch):
            ids = np.asarray(item.ids, dtype=np.int64).tobytes()
            # seed 0 is crc32's own start value: the default model's rows never change
            rng = np.random.default_rng(zlib.crc32(ids, self._seed))
            vector = rng.standard_normal(self._dimensions).astype(np.float32)
            out[row] = vector / np.linalg.norm(vector)
        return out
