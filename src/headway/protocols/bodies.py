"""The public request and response bodies of ``/v1/embeddings`` (OpenAI's) and
``/v1/rerank`` (Cohere's v1), and the error body every route answers with, strictly typed.

Decoding is strict: a boolean is not a number, a number is not a string, and
unknown fields are rejected where the API defines none. Limits that depend on
settings (texts per request, characters per text) are checked in ``validation``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from headway.protocols.parse import TextsOrTokenIds


class EmbeddingsRequest(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI ``POST /v1/embeddings``. Token ids decode (so that the refusal can say why and
    what to change, ``parse.texts_of``) but are refused; the document states text only."""

    input: TextsOrTokenIds
    model: str
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | float | None = None
    """A whole number: JSON (and JSON Schema) count ``384.0`` as one; ``parse`` checks."""
    user: str | None = None


class RerankDocument(msgspec.Struct):
    """A Cohere document object: ranked on ``text``; other fields are ignored."""

    text: str


class RerankRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Cohere v1 ``POST /v1/rerank``."""

    query: str
    documents: list[str | RerankDocument]
    model: str | None = None
    top_n: int | float | None = None
    """A whole number, as ``EmbeddingsRequest.dimensions``."""
    return_documents: bool = False


class Embedding(msgspec.Struct):
    index: int
    embedding: list[float] | str | msgspec.Raw
    """Floats, or base64 of little-endian float32; written as ``Raw`` JSON (an array)."""
    object: str = "embedding"


class EmbeddingsUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(msgspec.Struct):
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage
    object: str = "list"


class RerankResultDocument(msgspec.Struct):
    text: str


class RerankResult(msgspec.Struct, omit_defaults=True):
    index: int
    relevance_score: float
    document: RerankResultDocument | None = None


class BilledUnits(msgspec.Struct):
    search_units: int


class RerankMeta(msgspec.Struct):
    billed_units: BilledUnits
    api_version: dict[str, str] = msgspec.field(default_factory=lambda: {"version": "1"})


class RerankResponse(msgspec.Struct):
    id: str
    results: list[RerankResult]
    meta: RerankMeta


class ErrorDetail(msgspec.Struct):
    type: str
    message: str


class ErrorResponse(msgspec.Struct):
    error: ErrorDetail


embeddings_decoder = msgspec.json.Decoder(EmbeddingsRequest)
rerank_decoder = msgspec.json.Decoder(RerankRequest)
