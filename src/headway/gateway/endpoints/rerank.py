"""``POST /v1/rerank``, compatible with Cohere's v1 rerank.

Scores come from whichever pool serves the requested model: a cross-encoder
scores (query, document) pairs; an embedding model scores by cosine of query
and document embeddings, mapped to [0, 1]. Without a ``model``, the rerank alias
serves it if it exists, else the embedding model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headway import wire
from headway.errors import ValidationFailed
from headway.gateway import schemas
from headway.gateway.context import RequestContext
from headway.gateway.stages.merge import Merged
from headway.gateway.stages.parse import check_texts, decode, whole_number
from headway.gateway.stages.plan import ChunkHeader
from headway.http.asgi import Response, json_response
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

DOCUMENTS_PER_SEARCH_UNIT = 100


class Rerank:
    route = "rerank"

    def __init__(self, default_models: Sequence[str]) -> None:
        self.default_models = tuple(default_models)

    def parse(self, body: bytes, limits: LimitsSettings) -> RerankRequest:
        parsed = decode(schemas.rerank_decoder, body)
        documents = [doc if isinstance(doc, str) else doc.text for doc in parsed.documents]
        check_texts([parsed.query], limits, "query")
        check_texts(documents, limits, "documents")
        top_n = whole_number(parsed.top_n, "top_n")
        if top_n is not None and top_n < 1:
            raise ValidationFailed("`top_n` must be at least 1")
        models = (parsed.model,) if parsed.model is not None else self.default_models
        return RerankRequest(parsed, documents, models, top_n)


@dataclass(slots=True)
class RerankRequest:
    body: schemas.RerankRequest
    documents: list[str]
    models: Sequence[str]
    top_n: int | None

    @property
    def user(self) -> str | None:
        """Cohere's rerank names no end user: a sticky split keys on the tenant."""
        return None

    @property
    def texts(self) -> int:
        return len(self.documents)

    @property
    def cache_texts(self) -> None:
        """Not cached: a score belongs to a (query, document) pair, which rarely repeats."""
        return None

    def only(self, indices: Sequence[int]) -> RerankRequest:
        documents = self.documents
        return RerankRequest(self.body, [documents[i] for i in indices], self.models, self.top_n)

    def check(self, record: ModelRecord) -> None:
        """Any model serves: a cross-encoder scores pairs, an embedding model by cosine."""

    def chunk(self, part: slice, header: ChunkHeader) -> wire.Chunk:
        return wire.ScoreChunk(
            header.request_id,
            self.body.query,
            self.documents[part],
            0.0,
            header.priority,
            header.model_version,
        )

    def respond(self, merged: Merged, ctx: RequestContext, record: ModelRecord) -> Response:
        scores = merged.values
        documents = self.documents
        top_n = min(self.top_n or len(documents), len(documents))
        order = np.argsort(-scores, kind="stable")[:top_n]
        ranked = [
            schemas.RerankResult(
                index=int(i),
                relevance_score=float(scores[i]),
                document=(
                    schemas.RerankResultDocument(documents[i])
                    if self.body.return_documents
                    else None
                ),
            )
            for i in order
        ]
        units = -(-len(documents) // DOCUMENTS_PER_SEARCH_UNIT)
        response = schemas.RerankResponse(
            id=ctx.request_id,
            results=ranked,
            meta=schemas.RerankMeta(billed_units=schemas.BilledUnits(search_units=units)),
        )
        return json_response(response, headers={"x-model-version": record.version})
