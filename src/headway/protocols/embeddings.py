"""``POST /v1/embeddings``'s body (OpenAI's), decoded strictly and checked against the
limits: what the gateway serves and what a batch line must be, in one place.

``input`` is a text or a list of texts; token ids (an array of integers, or a batch of
them, which OpenAI's API takes and LangChain's ``OpenAIEmbeddings`` sends by default) are
refused with a 422 that says what to change."""

from __future__ import annotations

from dataclasses import dataclass

from headway.protocols import bodies
from headway.protocols.parse import check_texts, decode, texts_of, whole_number
from headway.settings import LimitsSettings

LANGCHAIN_FIX = (
    " (LangChain's OpenAIEmbeddings tokenizes with tiktoken and sends ids unless it is"
    " constructed with check_embedding_ctx_length=False.)"
)


@dataclass(frozen=True, slots=True)
class EmbeddingsAsk:
    model: str
    """As the client named it."""
    inputs: list[str]
    user: str | None
    base64: bool
    """``encoding_format: base64``: rows as base64 float32, not JSON numbers."""
    width: int | None
    """``dimensions``: a narrower width (``gateway/endpoints/fit.py`` checks it)."""


def parse_embeddings(body: bytes, limits: LimitsSettings) -> EmbeddingsAsk:
    parsed = decode(bodies.embeddings_decoder, body)
    inputs = texts_of(parsed.input, "input", LANGCHAIN_FIX)
    check_texts(inputs, limits, "input")
    base64 = parsed.encoding_format == "base64"
    width = whole_number(parsed.dimensions, "dimensions")
    return EmbeddingsAsk(parsed.model, inputs, parsed.user, base64, width)
