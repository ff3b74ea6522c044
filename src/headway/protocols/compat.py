"""Cohere v2's and TEI's request and response bodies, as those APIs define them.

Field names, optionality and answer shapes follow what the real clients send and parse:
cohere-python's ``V2Client.embed``/``rerank`` and ``EmbedByTypeResponse``/``V2RerankResponse``;
text-embeddings-inference's ``router/src/http/types.rs`` (``EmbedRequest``,
``RerankRequest``, ``Rank``, ``Info``, ``ErrorResponse``), which ``huggingface_hub``'s
``InferenceClient.feature_extraction`` speaks. Decoding is strict as for headway's own
bodies (``schemas.py``): unknown fields are refused (422), so a field headway does not
implement is named rather than ignored. Values a field may hold but headway refuses (a
truncation headway cannot do, say) are decoded, then refused by the endpoint with what to
send instead; the OpenAPI document states only the values served (``openapi.py``).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from headway.protocols.parse import TextsOrTokenIds

# Cohere v2 ------------------------------------------------------------------------------

EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
InputType = Literal["search_document", "search_query", "classification", "clustering", "image"]


class CohereEmbedRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Cohere ``POST /v2/embed`` (texts; not ``images`` nor ``inputs``)."""

    model: str
    texts: list[str]
    input_type: InputType
    """Chooses the model's prompt for the kind of text (a model without prompts embeds every
    kind alike; ``image`` is refused)."""
    embedding_types: list[EmbeddingType] | None = None
    """None: ``["float"]``."""
    truncate: Literal["NONE", "START", "END"] | None = None
    """Which end of a text over the model's limit loses tokens; NONE: refused. None: END."""
    max_tokens: int | float | None = None
    output_dimension: int | float | None = None
    priority: int | float | None = None
    """Accepted (a whole number); the tenant's tier decides priority (interactive before
    batch)."""


class CohereRerankRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Cohere ``POST /v2/rerank``."""

    model: str
    query: str
    documents: list[str]
    top_n: int | float | None = None
    max_tokens_per_doc: int | float | None = None
    priority: int | float | None = None
    """Accepted (a whole number); the tenant's tier decides priority (interactive before
    batch)."""


class CohereEmbeddingsByType(msgspec.Struct, omit_defaults=True):
    """Each type asked for, one row per text (Cohere's ``EmbedByTypeResponseEmbeddings``)."""

    float_: list[msgspec.Raw] | None = msgspec.field(default=None, name="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereApiVersion(msgspec.Struct):
    version: str = "2"


class CohereBilledUnits(msgspec.Struct, omit_defaults=True):
    input_tokens: int | None = None
    search_units: int | None = None


class CohereMeta(msgspec.Struct):
    billed_units: CohereBilledUnits
    api_version: CohereApiVersion = msgspec.field(default_factory=CohereApiVersion)


class CohereEmbedResponse(msgspec.Struct):
    id: str
    embeddings: CohereEmbeddingsByType
    texts: list[str]
    meta: CohereMeta
    response_type: str = "embeddings_by_type"


class CohereRerankResult(msgspec.Struct):
    index: int
    relevance_score: float


class CohereRerankResponse(msgspec.Struct):
    id: str
    results: list[CohereRerankResult]
    meta: CohereMeta


cohere_embed_decoder = msgspec.json.Decoder(CohereEmbedRequest)
cohere_rerank_decoder = msgspec.json.Decoder(CohereRerankRequest)

# TEI ------------------------------------------------------------------------------------

TruncationDirection = Literal["Left", "left", "Right", "right"]


class TeiEmbedRequest(msgspec.Struct, forbid_unknown_fields=True):
    """TEI ``POST /embed`` (and ``POST /``, its compatibility route)."""

    inputs: TextsOrTokenIds
    truncate: bool | None = None
    """None or true: truncate at the model's limit; false: refuse a text over it."""
    truncation_direction: TruncationDirection = "Right"
    prompt_name: str | None = None
    """One of the model's prompts, put before each input; None: its default prompt."""
    normalize: bool = True
    """True: unit-length rows. False (the pooled rows as they are) is not served: headway's
    models may normalise inside their graph."""
    dimensions: int | float | None = None


class TeiTokenizeRequest(msgspec.Struct, forbid_unknown_fields=True):
    """TEI ``POST /tokenize``: each input's tokens, untruncated (answered as TEI's
    ``SimpleToken``s: ``wire.Token``)."""

    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None
    """One of the model's prompts, put before each input (and so tokenized with it)."""


class TeiDecodeRequest(msgspec.Struct, forbid_unknown_fields=True):
    """TEI ``POST /decode``: token ids (one sequence, or a batch) back to text."""

    ids: list[int | float | list[int | float]]
    """One sequence of ids, or a list of sequences (not both in one list); an id is a whole
    number (``5.0`` is one, as JSON Schema says)."""
    skip_special_tokens: bool = True


class TeiRerankRequest(msgspec.Struct, forbid_unknown_fields=True):
    """TEI ``POST /rerank``."""

    query: str
    texts: list[str]
    truncate: bool | None = None
    truncation_direction: TruncationDirection = "Right"
    raw_scores: bool = False
    """True: the model's own scores (cosine, or a cross-encoder's logit), not in [0, 1]."""
    return_text: bool = False


class TeiRank(msgspec.Struct, omit_defaults=True):
    index: int
    score: float
    text: str | None = None


class TeiEmbeddingModel(msgspec.Struct):
    pooling: str


class TeiClassifierModel(msgspec.Struct):
    id2label: dict[str, str]
    label2id: dict[str, int]


class TeiModelType(msgspec.Struct, omit_defaults=True):
    """One of its fields is set: TEI's ``ModelType`` (an externally tagged enum)."""

    embedding: TeiEmbeddingModel | None = None
    reranker: TeiClassifierModel | None = None


class TeiInfo(msgspec.Struct):
    """TEI ``GET /info``: the model ``/embed`` and ``/`` serve, and the router's limits."""

    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: TeiModelType
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    served_model_name: str | None = None
    sha: str | None = None
    docker_label: str | None = None


TeiErrorType = Literal["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"]


class TeiError(msgspec.Struct):
    """TEI's error body (``ErrorResponse``); ``error_type`` is its ``ErrorType`` as serde
    writes it."""

    error: str
    error_type: TeiErrorType


tei_embed_decoder = msgspec.json.Decoder(TeiEmbedRequest)
tei_rerank_decoder = msgspec.json.Decoder(TeiRerankRequest)
tei_tokenize_decoder = msgspec.json.Decoder(TeiTokenizeRequest)
tei_decode_decoder = msgspec.json.Decoder(TeiDecodeRequest)
