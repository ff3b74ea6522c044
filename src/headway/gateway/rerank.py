"""``POST /v1/rerank``, compatible with Cohere's v1 rerank.

Scores come from whichever pool serves the requested model: a cross-encoder
scores (query, document) pairs; an embedding model scores by cosine of query
and document embeddings, mapped to [0, 1].
"""

from __future__ import annotations

from functools import partial

import numpy as np

from headway.errors import NotFound, ValidationFailed
from headway.gateway import schemas
from headway.gateway.auth import authenticate, require_tenant
from headway.gateway.call import Call
from headway.gateway.deadline import deadline_from_headers
from headway.gateway.dispatch import call_chunk, gather_or_cancel
from headway.gateway.fanout import merge, split
from headway.gateway.service import GatewayService
from headway.gateway.validation import check_media_type, check_texts, decode
from headway.http.asgi import Response, json_response
from headway.registry.model import ModelRecord
from headway.worker import protocol

DOCUMENTS_PER_SEARCH_UNIT = 100


def _chunk_body(
    request_id: str,
    query: str,
    documents: list[str],
    priority: int,
    version: str,
    timeout_ms: float,
) -> bytes:
    return protocol.encode(
        protocol.ScoreChunk(request_id, query, documents, timeout_ms, priority, version)
    )


def _rerank_model(service: GatewayService, requested: str | None) -> ModelRecord:
    if requested is not None:
        return service.resolve(requested)
    try:
        return service.resolve(service.rerank_model)
    except NotFound:
        return service.resolve(service.embed_model)


async def rerank(service: GatewayService, call: Call) -> Response:
    request = call.request
    check_media_type(request.headers)
    tenant = require_tenant(authenticate(request.headers, service.snapshot))
    call.tenant = tenant.name
    settings = service.settings
    deadline = deadline_from_headers(
        request.headers,
        default_ms=settings.default_timeout_ms,
        max_ms=settings.max_timeout_ms,
        clock=service.clock,
    )
    body = decode(schemas.rerank_decoder, request.body)
    documents = [doc if isinstance(doc, str) else doc.text for doc in body.documents]
    check_texts([body.query], settings.limits, "query")
    check_texts(documents, settings.limits, "documents")
    if body.top_n is not None and body.top_n < 1:
        raise ValidationFailed("`top_n` must be at least 1")
    record = _rerank_model(service, body.model)
    pool = service.pool_serving(record)
    priority = protocol.PRIORITY_BATCH if tenant.tier == "batch" else protocol.PRIORITY_INTERACTIVE
    results = await gather_or_cancel(
        [
            call_chunk(
                pool,
                service.transport,
                "/internal/score",
                partial(
                    _chunk_body,
                    call.request_id,
                    body.query,
                    documents[part],
                    priority,
                    record.version,
                ),
                part.stop - part.start,
                deadline,
            )
            for part in split(len(documents), settings.chunk_texts)
        ]
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
