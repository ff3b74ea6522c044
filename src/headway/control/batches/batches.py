"""``/v1/batches``: create, read, list and cancel a tenant's batches.

Creating a batch checks what can be checked at once (the endpoint is one this
gateway serves, the window is ``24h``, the metadata fits OpenAI's limits — all in the
request's schema — and the input is one of the tenant's own ``batch`` files) and
records it as ``validating`` — unless the tenant has as many batches not yet finished as
its bound allows (``bounds``: 429 with ``Retry-After``, counted in the same transaction
as the insert); an executor then reads every line
(``batches/executor.py``). Cancelling moves a validating or
running batch to ``cancelling``; the executor stops its lines and ends it
``cancelled``, with the lines already answered in its output file. Another tenant's
batch is a 404, as an unknown one.
"""

from __future__ import annotations

from headway.batches.model import Batch, new_batch_id
from headway.batches.offload import off_loop
from headway.control.batches import schemas
from headway.control.batches.bounds import bounds_of, refusal
from headway.control.batches.parts import BatchParts
from headway.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LimitReached,
    NotFound,
    Unauthorized,
    ValidationFailed,
)
from headway.gateway.auth.kinds import TENANT_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import one_each, query_limit
from headway.gateway.stages.authenticate import caller_of
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.protocols.parse import decode_stored
from headway.tracing.spans import current_traceparent

COMPLETION_WINDOW_S = {"24h": 86400}
MAX_LISTED = 100
_ERRORS = (Unauthorized, Forbidden, NotFound)


def routes(parts: BatchParts) -> list[DocumentedRoute]:
    return [
        DocumentedRoute(
            Route("POST", "/v1/batches", "batches", create(parts), auth=TENANT_KEY),
            Operation(
                "Create a batch of one input file's lines against one endpoint",
                schemas.BatchObject,
                schemas.BatchCreate,
                errors=(*_ERRORS, InvalidRequest, ValidationFailed, LimitReached),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("GET", "/v1/batches", "batches", list_batches(parts), auth=TENANT_KEY),
            Operation(
                "The tenant's batches, newest first (limit, after)",
                schemas.BatchList,
                errors=(*_ERRORS, ValidationFailed),
                authenticated=True,
                query=[
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LISTED},
                    },
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                ],
            ),
        ),
        DocumentedRoute(
            Route("GET", "/v1/batches/{batch_id}", "batch", get_batch(parts), auth=TENANT_KEY),
            Operation(
                "One of the tenant's batches",
                schemas.BatchObject,
                errors=_ERRORS,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "POST",
                "/v1/batches/{batch_id}/cancel",
                "batch_cancel",
                cancel(parts),
                auth=TENANT_KEY,
            ),
            Operation(
                "Cancel a batch: its lines stop; those answered stay in its output",
                schemas.BatchObject,
                errors=(*_ERRORS, Conflict),
                authenticated=True,
            ),
        ),
    ]


def create(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        caller = caller_of(request)
        tenant = caller.tenant
        request.tenant = tenant.name
        body = decode_stored(schemas.batch_create_decoder, request.body)
        record = await off_loop(parts.store.file, tenant.id, body.input_file_id)
        if record is None:
            raise NotFound(f"no file {body.input_file_id[:64]!r}")
        if record.purpose != "batch":
            raise ValidationFailed(f"file {record.id} is a batch's output, not a batch input")
        now = parts.now()
        batch = Batch(
            id=new_batch_id(),
            tenant_id=tenant.id,
            tenant=tenant.name,
            key_id=caller.key_id,
            endpoint=body.endpoint,
            input_file_id=record.id,
            completion_window=body.completion_window,
            status="validating",
            created_at=now,
            expires_at=now + COMPLETION_WINDOW_S[body.completion_window],
            metadata=dict(body.metadata or {}),
            traceparent=current_traceparent() or "",
        )
        bounds = bounds_of(tenant, parts.settings)
        over = await off_loop(parts.store.add_batch, batch, bounds.max_open_batches)
        if over is not None:
            raise refusal(over)
        return json_response(schemas.batch_of(batch))

    return handle


def get_batch(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        return json_response(schemas.batch_of(await _own_batch(parts, request)))

    return handle


def list_batches(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        tenant_id = caller_of(request).tenant.id
        query = one_each(request.query(), {"limit", "after"})
        limit = query_limit(query.get("limit"), default=20, most=MAX_LISTED)
        found = await off_loop(
            parts.store.batches, tenant_id, limit=limit + 1, after=query.get("after")
        )
        data = [schemas.batch_of(batch) for batch in found[:limit]]
        first, last = (data[0].id, data[-1].id) if data else (None, None)
        return json_response(schemas.BatchList(data, len(found) > limit, first, last))

    return handle


def cancel(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        batch = await _own_batch(parts, request)
        if batch.status in ("cancelling", "cancelled"):
            return json_response(schemas.batch_of(batch))  # asked twice: the same answer
        moved = await off_loop(
            parts.store.move, batch.id, ("validating", "in_progress"), "cancelling", parts.now()
        )
        if moved is None:
            now = await off_loop(parts.store.batch_by_id, batch.id)
            status = now.status if now is not None else "deleted"
            raise Conflict(
                f"batch {batch.id} is {status}; only a validating or in-progress batch can be "
                "cancelled"
            )
        return json_response(schemas.batch_of(moved))

    return handle


async def _own_batch(parts: BatchParts, request: Request) -> Batch:
    tenant_id = caller_of(request).tenant.id
    batch_id = request.path_params["batch_id"]
    batch = await off_loop(parts.store.batch, tenant_id, batch_id)
    if batch is None:
        raise NotFound(f"no batch {batch_id[:64]!r}")
    return batch
