"""``POST /v1/rerank``, compatible with Cohere's v1 rerank.

Scores come from whichever pool serves the requested model: a cross-encoder
scores (query, document) pairs; an embedding model scores by cosine of query
and document embeddings, mapped to [0, 1]. Without a ``model``, the rerank alias
serves it if it exists, else the embedding model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headway.errors import ValidationFailed
from headway.gateway import schemas
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.work import RankWork, Scores
from headway.gateway.stages.parse import check_texts, decode, whole_number
from headway.http.asgi import Response, json_response
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

DOCUMENTS_PER_SEARCH_UNIT = 100


def search_units(documents: int) -> int:
    """Cohere bills a search unit per query of up to 100 documents."""
    return -(-documents // DOCUMENTS_PER_SEARCH_UNIT)


def top_n_of(value: float | None) -> int | None:
    top_n = whole_number(value, "top_n")
    if top_n is not None and top_n < 1:
        raise ValidationFailed("`top_n` must be at least 1")
    return top_n


class Rerank:
    route = "rerank"

    def __init__(self, default_models: Sequence[str]) -> None:
        self.default_models = tuple(default_models)

    def parse(self, body: bytes, limits: LimitsSettings) -> RankWork:
        parsed = decode(schemas.rerank_decoder, body)
        documents = [doc if isinstance(doc, str) else doc.text for doc in parsed.documents]
        check_texts([parsed.query], limits, "query")
        check_texts(documents, limits, "documents")
        top_n = top_n_of(parsed.top_n)
        models = (parsed.model,) if parsed.model is not None else self.default_models
        answer = CohereV1Answer(documents, parsed.return_documents)
        return RankWork(models, parsed.query, documents, answer, top_n)


@dataclass(frozen=True, slots=True)
class CohereV1Answer:
    documents: list[str]
    return_documents: bool

    def __call__(
        self,
        scores: Scores,
        ranked: Sequence[int],
        tokens: int,
        ctx: RequestContext,
        record: ModelRecord,
    ) -> Response:
        documents = self.documents
        results = [
            schemas.RerankResult(
                index=i,
                relevance_score=float(scores[i]),
                document=(
                    schemas.RerankResultDocument(documents[i]) if self.return_documents else None
                ),
            )
            for i in ranked
        ]
        units = schemas.BilledUnits(search_units=search_units(len(documents)))
        response = schemas.RerankResponse(
            id=ctx.request_id, results=results, meta=schemas.RerankMeta(billed_units=units)
        )
        return json_response(response, headers={"x-model-version": record.version})
