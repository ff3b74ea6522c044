"""``POST /v1/embeddings``, OpenAI-compatible."""

from __future__ import annotations

import base64
from functools import partial

from headway.errors import ValidationFailed
from headway.gateway import schemas
from headway.gateway.auth import authenticate, require_tenant
from headway.gateway.call import Call
from headway.gateway.deadline import deadline_from_headers
from headway.gateway.dispatch import call_chunk, gather_or_cancel
from headway.gateway.fanout import merge, split
from headway.gateway.service import GatewayService
from headway.gateway.validation import check_media_type, check_texts, decode
from headway.http.asgi import Response, json_response
from headway.worker import protocol


def _chunk_body(
    request_id: str, texts: list[str], priority: int, version: str, timeout_ms: float
) -> bytes:
    return protocol.encode(protocol.EmbedChunk(request_id, texts, timeout_ms, priority, version))


async def create_embeddings(service: GatewayService, call: Call) -> Response:
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
    body = decode(schemas.embeddings_decoder, request.body)
    texts = [body.input] if isinstance(body.input, str) else body.input
    check_texts(texts, settings.limits, "input")
    record = service.resolve(body.model)
    if record.kind != "embedding":
        raise ValidationFailed(f"model {body.model!r} is a {record.kind}; use /v1/rerank")
    if body.dimensions is not None and body.dimensions != record.dimensions:
        raise ValidationFailed(
            f"model {body.model!r} produces {record.dimensions} dimensions, not {body.dimensions}"
        )
    pool = service.pool_serving(record)
    priority = protocol.PRIORITY_BATCH if tenant.tier == "batch" else protocol.PRIORITY_INTERACTIVE
    results = await gather_or_cancel(
        [
            call_chunk(
                pool,
                service.transport,
                "/internal/embed",
                partial(_chunk_body, call.request_id, texts[part], priority, record.version),
                part.stop - part.start,
                deadline,
            )
            for part in split(len(texts), settings.chunk_texts)
        ]
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
