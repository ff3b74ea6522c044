"""``POST /v1/embeddings``, OpenAI-compatible."""

from __future__ import annotations

import base64

from headway.errors import ValidationFailed
from headway.gateway import schemas
from headway.gateway.call import Call
from headway.gateway.fanout import merge
from headway.gateway.pipeline import begin, priority, run_chunks
from headway.gateway.service import GatewayService
from headway.gateway.validation import check_texts, decode
from headway.http.asgi import Response, json_response
from headway.worker import protocol


async def create_embeddings(service: GatewayService, call: Call) -> Response:
    deadline = begin(service, call, service.route_pool("embeddings"))
    body = decode(schemas.embeddings_decoder, call.request.body)
    texts = [body.input] if isinstance(body.input, str) else body.input
    check_texts(texts, service.settings.limits, "input")
    record = service.resolve(body.model)
    if record.kind != "embedding":
        raise ValidationFailed(f"model {body.model!r} is a {record.kind}; use /v1/rerank")
    if body.dimensions is not None and body.dimensions != record.dimensions:
        raise ValidationFailed(
            f"model {body.model!r} produces {record.dimensions} dimensions, not {body.dimensions}"
        )
    pool = service.pool_serving(record)
    tier_priority = priority(call.tier)

    def chunk(part: slice, budget_ms: float) -> bytes:
        return protocol.encode(
            protocol.EmbedChunk(
                call.request_id, texts[part], budget_ms, tier_priority, record.version
            )
        )

    results = await run_chunks(
        service, call, pool, "/internal/embed", len(texts), chunk, deadline, record.version
    )
    matrix = merge([result.array() for result in results])
    tokens = sum(result.tokens for result in results)
    call.texts = len(texts)
    if body.encoding_format == "base64":
        data = [
            schemas.Embedding(i, base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
            for i, row in enumerate(matrix)
        ]
    else:
        data = [schemas.Embedding(i, row) for i, row in enumerate(matrix.tolist())]
    response = schemas.EmbeddingsResponse(
        data=data, model=body.model, usage=schemas.EmbeddingsUsage(tokens, tokens)
    )
    return json_response(response, headers={"x-model-version": record.version})
