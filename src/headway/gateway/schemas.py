"""The public request and response bodies, strictly typed.

Decoding is strict: a boolean is not a number, a number is not a string, and
unknown fields are rejected where the API defines none. Limits that depend on
settings (texts per request, characters per text) are checked in ``validation``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from headway.gateway.stages.parse import TextsOrTokenIds


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


class ModelEntry(msgspec.Struct):
    id: str
    version: str
    kind: str
    dimensions: int
    object: str = "model"
    owned_by: str = "headway"


class ModelList(msgspec.Struct):
    """``GET /v1/models``: the names (aliases and versions) of the models being served."""

    data: list[ModelEntry]
    object: str = "list"


class Health(msgspec.Struct):
    status: str


class PoolReadiness(msgspec.Struct):
    ready: int
    replicas: int


class Readiness(msgspec.Struct):
    """``GET /readyz``: 200 when every pool has a ready replica (or, with
    ``gateway.cold_start_hold``, is cold: its requests wait for one) and the gateway is not
    draining."""

    ready: bool
    pools: dict[str, PoolReadiness]


class ReplicaState(msgspec.Struct):
    url: str
    state: Literal["ready", "unready", "ejected"]
    model_version: str
    versions: list[str]
    outstanding_texts: int
    latency_ms: float
    consecutive_failures: int
    ejections: int


class PoolRouting(msgspec.Struct):
    hedging: bool
    quantile: float
    latency_quantile_ms: float | None
    chunks: int
    retries: int
    hedges: int
    hedges_won: int


class Replicas(msgspec.Struct):
    """``GET /admin/replicas``: each pool's replicas, and what its chunks cost in attempts."""

    pools: dict[str, list[ReplicaState]]
    routing: dict[str, PoolRouting]


class UsageEntry(msgspec.Struct):
    """Billable usage of one tenant in one period (``group_by=hour|day``), or of one
    model version over the whole range (``group_by=model``). A tenant is its id: one
    created with a deleted tenant's name has usage of its own (0: usage recorded, by
    name, before usage carried tenant ids)."""

    tenant_id: int
    tenant: str
    period_start: str
    """RFC 3339, UTC: the hour's or the day's start; for ``model``, the range's start."""
    model: str | None
    version: str | None
    requests: int
    texts: int
    tokens: int


class Usage(msgspec.Struct):
    """Usage in ``[start, end)`` from the ledger (what has been billed so far)."""

    start: str
    end: str
    group_by: Literal["hour", "day", "model"]
    data: list[UsageEntry]
    object: str = "list"
