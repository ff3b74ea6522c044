"""``POST /v1/rerank``, compatible with Cohere's v1 rerank.

Scores come from whichever pool serves the requested model: a cross-encoder
scores (query, document) pairs; an embedding model scores by cosine of query
and document embeddings, mapped to [0, 1].
"""

from __future__ import annotations

import numpy as np

from headway.errors import NotFound, ValidationFailed
from headway.gateway import schemas
from headway.gateway.call import Call
from headway.gateway.fanout import merge
from headway.gateway.pipeline import begin, priority, run_chunks
from headway.gateway.service import GatewayService
from headway.gateway.validation import check_texts, decode
from headway.http.asgi import Response, json_response
from headway.registry.model import ModelRecord
from headway.worker import protocol

DOCUMENTS_PER_SEARCH_UNIT = 100


def _rerank_model(service: GatewayService, requested: str | None) -> ModelRecord:
    if requested is not None:
        return service.resolve(requested)
    try:
        return service.resolve(service.rerank_model)
    except NotFound:
        return service.resolve(service.embed_model)


async def rerank(service: GatewayService, call: Call) -> Response:
    deadline = begin(service, call, service.route_pool("rerank"))
    body = decode(schemas.rerank_decoder, call.request.body)
    documents = [doc if isinstance(doc, str) else doc.text for doc in body.documents]
    limits = service.settings.limits
    check_texts([body.query], limits, "query")
    check_texts(documents, limits, "documents")
    if body.top_n is not None and body.top_n < 1:
        raise ValidationFailed("`top_n` must be at least 1")
    record = _rerank_model(service, body.model)
    pool = service.pool_serving(record)
    tier_priority = priority(call.tier)

    def chunk(part: slice, budget_ms: float) -> bytes:
        return protocol.encode(
            protocol.ScoreChunk(
                call.request_id,
                body.query,
                documents[part],
                budget_ms,
                tier_priority,
                record.version,
            )
        )

    results = await run_chunks(
        service, call, pool, "/internal/score", len(documents), chunk, deadline, record.version
    )
    scores = merge([result.array() for result in results])
    call.texts = len(documents)
    top_n = min(body.top_n or len(documents), len(documents))
    order = np.argsort(-scores, kind="stable")[:top_n]
    ranked = [
        schemas.RerankResult(
            index=int(i),
            relevance_score=float(scores[i]),
            document=schemas.RerankResultDocument(documents[i]) if body.return_documents else None,
        )
        for i in order
    ]
    units = -(-len(documents) // DOCUMENTS_PER_SEARCH_UNIT)
    response = schemas.RerankResponse(
        id=call.request_id,
        results=ranked,
        meta=schemas.RerankMeta(billed_units=schemas.BilledUnits(search_units=units)),
    )
    return json_response(response, headers={"x-model-version": record.version})
