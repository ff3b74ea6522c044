"""``POST /v1/rerank``, compatible with Cohere's v1 rerank.

Scores come from whichever pool serves the requested model: a cross-encoder
scores (query, document) pairs; an embedding model scores by cosine of query
and document embeddings, mapped to [0, 1]. Without a ``model``, the rerank alias
serves it if it exists, else the embedding model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headway.gateway.context import RequestContext
from headway.gateway.endpoints.work import RankWork, Scores
from headway.http.asgi import Response, json_response
from headway.protocols import bodies
from headway.protocols.rerank import parse_rerank, search_units
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings


class Rerank:
    route = "rerank"

    def __init__(self, default_models: Sequence[str]) -> None:
        self.default_models = tuple(default_models)

    def parse(self, body: bytes, limits: LimitsSettings) -> RankWork:
        ask = parse_rerank(body, limits)
        models = (ask.model,) if ask.model is not None else self.default_models
        answer = CohereV1Answer(ask.documents, ask.return_documents)
        return RankWork(models, ask.query, ask.documents, answer, ask.top_n)


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
            bodies.RerankResult(
                index=i,
                relevance_score=float(scores[i]),
                document=(
                    bodies.RerankResultDocument(documents[i]) if self.return_documents else None
                ),
            )
            for i in ranked
        ]
        units = bodies.BilledUnits(search_units=search_units(len(documents)))
        response = bodies.RerankResponse(
            id=ctx.request_id, results=results, meta=bodies.RerankMeta(billed_units=units)
        )
        return json_response(response, headers={"x-model-version": record.version})
