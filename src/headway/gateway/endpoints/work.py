"""The model requests every protocol's endpoint builds: texts to embed, documents to rank.

OpenAI's ``/v1/embeddings``, Cohere's ``/v2/embed``, TEI's ``/embed`` and ``/`` all ask
for the same work (texts → rows of one embedding model) in different words, and
``/v1/rerank``, ``/v2/rerank`` and TEI's ``/rerank`` likewise (documents → scores
against a query). Each endpoint's ``parse`` translates its body into an ``EmbedWork`` or
a ``RankWork`` and hands it the protocol's own answer (an ``EmbedAnswer`` or a
``RankAnswer``); from there on the request path (``gateway/path.py``) is the same for all
of them: quota, cache, admission, fan-out, usage event. A protocol is a translation at
the edge, never a second pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from headway import wire
from headway.errors import ValidationFailed
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.fit import Rows, check_max_tokens, check_width, narrowed
from headway.gateway.endpoints.prompts import DEFAULT, PromptAsk, prompt_for
from headway.gateway.stages.merge import Merged
from headway.gateway.stages.plan import ChunkHeader
from headway.http.asgi import Response
from headway.registry.model import ModelRecord

Scores = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Asked:
    """A protocol's names for what a request asks of the model's shape (error messages)."""

    width_field: str = "dimensions"
    token_field: str = "max_tokens"
    other_kind: str = "/v1/rerank"
    """Where a request for the other kind of model should go."""


OPENAI = Asked()


class EmbedAnswer(Protocol):
    def __call__(
        self, rows: Rows, tokens: int, ctx: RequestContext, record: ModelRecord
    ) -> Response:
        """The protocol's answer for ``rows`` (one per text, in order, at the asked width)."""


@dataclass(slots=True)
class EmbedWork:
    models: Sequence[str]
    inputs: list[str]
    user: str | None
    answer: EmbedAnswer
    width: int | None = None
    """A narrower width asked for (None: the model's own)."""
    max_tokens: int | None = None
    asked: Asked = OPENAI
    prompt: PromptAsk = DEFAULT
    truncation: wire.Truncation = "right"

    @property
    def texts(self) -> int:
        return len(self.inputs)

    @property
    def cache_texts(self) -> Sequence[str]:
        return self.inputs

    def only(self, indices: Sequence[int]) -> EmbedWork:
        inputs = self.inputs
        return replace(self, inputs=[inputs[i] for i in indices])

    def for_model(self, record: ModelRecord) -> EmbedWork:
        """Checked against the model, each input behind the model's prompt (so the cache,
        the tokens and the bill are the prompted text's)."""
        if record.kind != "embedding":
            raise ValidationFailed(
                f"model {record.name!r} is a {record.kind}; use {self.asked.other_kind}"
            )
        check_width(self.width, record, self.asked.width_field)
        check_max_tokens(self.max_tokens, record, self.asked.token_field)
        prompt = prompt_for(self.prompt, record)
        if not prompt:
            return self
        return replace(self, inputs=[prompt + text for text in self.inputs], prompt=DEFAULT)

    def chunk(self, part: slice, header: ChunkHeader) -> wire.Chunk:
        return wire.EmbedChunk(
            header.request_id,
            self.inputs[part],
            0.0,
            header.priority,
            header.model_version,
            self.truncation,
        )

    def respond(self, merged: Merged, ctx: RequestContext, record: ModelRecord) -> Response:
        rows = narrowed(merged.values.astype(np.float32, copy=False), self.width)
        return self.answer(rows, merged.tokens, ctx, record)


class RankAnswer(Protocol):
    def __call__(
        self,
        scores: Scores,
        ranked: Sequence[int],
        tokens: int,
        ctx: RequestContext,
        record: ModelRecord,
    ) -> Response:
        """The protocol's answer: ``scores`` in document order, ``ranked`` the indices of the
        top documents, most relevant first (ties in document order)."""


@dataclass(slots=True)
class RankWork:
    """Any model serves: a cross-encoder scores pairs, an embedding model by cosine."""

    models: Sequence[str]
    query: str
    documents: list[str]
    answer: RankAnswer
    top_n: int | None = None
    max_tokens: int | None = None
    asked: Asked = OPENAI
    truncation: wire.Truncation = "right"

    @property
    def user(self) -> str | None:
        """No rerank protocol names an end user: a sticky split keys on the tenant."""
        return None

    @property
    def texts(self) -> int:
        return len(self.documents)

    @property
    def cache_texts(self) -> None:
        """Not cached: a score belongs to a (query, document) pair, which rarely repeats."""
        return None

    def only(self, indices: Sequence[int]) -> RankWork:
        documents = self.documents
        return replace(self, documents=[documents[i] for i in indices])

    def for_model(self, record: ModelRecord) -> RankWork:
        check_max_tokens(self.max_tokens, record, self.asked.token_field)
        return self

    def chunk(self, part: slice, header: ChunkHeader) -> wire.Chunk:
        return wire.ScoreChunk(
            header.request_id,
            self.query,
            self.documents[part],
            0.0,
            header.priority,
            header.model_version,
            self.truncation,
        )

    def respond(self, merged: Merged, ctx: RequestContext, record: ModelRecord) -> Response:
        scores = merged.values
        top_n = min(self.top_n or len(self.documents), len(self.documents))
        ranked = [int(i) for i in np.argsort(-scores, kind="stable")[:top_n]]
        return self.answer(scores, ranked, merged.tokens, ctx, record)
