"""The executor's routes: one line of a batch, served as its tenant's batch-tier work.

``POST /internal/batches/v1/embeddings`` and ``…/v1/rerank`` run the public routes' request
path (``path.serve``); only the caller differs. The executor presents ``batches.executor_token``
and names in headers the tenant, the key that created the batch (the usage event names it), the
batch and line (``claims.py`` checks them) and the line's request id: the line's own
(``batches.model.line_request_id``), the same on every attempt, so a line retried after an
executor died is billed once (the ledger keeps one event per request id).

The tenant is named by id, never by name: a line whose tenant was deleted is answered 404 (in
the batch's error file) even once a new tenant has the name, and never runs as that one. A line
that names its tenant only by name, or no batch and line, is refused with a 403, which the
executor waits out without failing a line (upgrade it).

The tier becomes ``batch`` whatever the tenant's is: the line takes only the capacity the batch
tier may use (admission sheds it first), waits below interactive work in the workers' queues,
and is priced as batch work. Its quota is the tenant's own bucket: the executor waits out a 429
rather than failing the line.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from headway.errors import Forbidden, NotFound, ValidationFailed
from headway.gateway.lines.claims import MAX_LINE, LineClaim
from headway.gateway.query import whole_number
from headway.gateway.stages.authenticate import Caller
from headway.http.asgi import Request
from headway.registry.model import Snapshot

TENANT_ID = "x-headway-tenant-id"
KEY_ID = "x-headway-key-id"
REQUEST_ID = "x-headway-request-id"
BATCH_ID = "x-headway-batch-id"
LINE = "x-headway-line"
PATHS = {"embeddings": "/internal/batches/v1/embeddings", "rerank": "/internal/batches/v1/rerank"}

_HEX = re.compile(r"[0-9a-f]{16,64}")
MAX_TENANT_ID = 2**63 - 1
_BATCH_ID = re.compile(r"batch_[0-9A-Za-z_-]{1,64}")

_HEX_ID = {"type": "string", "pattern": "^[0-9a-f]{16,64}$"}
OPENAPI_HEADERS: list[dict[str, Any]] = [
    {
        "name": TENANT_ID,
        "in": "header",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TENANT_ID},
        "description": "The id of the tenant the line is run for (its batch's).",
    },
    {
        "name": KEY_ID,
        "in": "header",
        "required": True,
        "schema": _HEX_ID,
        "description": "The id of the key that created the batch (the usage event names it).",
    },
    {
        "name": REQUEST_ID,
        "in": "header",
        "required": True,
        "schema": _HEX_ID,
        "description": "The line's own request id, the same on every attempt (billed once).",
    },
    {
        "name": BATCH_ID,
        "in": "header",
        "required": True,
        "schema": {"type": "string", "pattern": "^batch_[0-9A-Za-z_-]{1,64}$"},
        "description": "The batch the line is of: it must be in_progress, of this tenant and key.",
    },
    {
        "name": LINE,
        "in": "header",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LINE},
        "description": "The line's number in the batch's input (1-based); the request id is its.",
    },
]
"""The headers above, as the OpenAPI document describes them."""


def line_caller(request: Request, snapshot: Snapshot) -> Caller:
    """The caller of a line, once the executor's token has been checked
    (``gateway/auth/checks.py``): the tenant the executor names by id, at tier batch."""
    presented_id = request.headers.get(TENANT_ID)
    if presented_id is None:
        raise Forbidden(
            f"batch lines name their tenant by id ({TENANT_ID}) on this gateway:"
            " upgrade the batch executor"
        )
    tenant_id = whole_number(presented_id, TENANT_ID, least=1, most=MAX_TENANT_ID)
    tenant = snapshot.tenant_ids.get(tenant_id)
    if tenant is None:
        raise NotFound(f"tenant {tenant_id} does not exist (deleted)")
    request.id = _hex(request.headers.get(REQUEST_ID, ""), REQUEST_ID)
    key_id = _hex(request.headers.get(KEY_ID, ""), KEY_ID)
    return Caller(replace(tenant, tier="batch"), key_id, retried=True)


def line_claim(request: Request, caller: Caller) -> LineClaim:
    """The batch and line ``request`` says it runs (``claims.py`` checks them)."""
    batch_id = request.headers.get(BATCH_ID)
    line = request.headers.get(LINE)
    if batch_id is None or line is None:
        raise Forbidden(
            f"batch lines name their batch and line ({BATCH_ID}, {LINE}) on this gateway:"
            " upgrade the batch executor"
        )
    if _BATCH_ID.fullmatch(batch_id) is None:
        raise ValidationFailed(f"{BATCH_ID} must be a batch id (batch_…)")
    number = whole_number(line, LINE, least=1, most=MAX_LINE)
    return LineClaim(batch_id, number, caller.tenant.id, caller.key_id, request.id)


def _hex(value: str, header: str) -> str:
    if _HEX.fullmatch(value) is None:
        raise ValidationFailed(f"{header} must be 16 to 64 lowercase hex digits")
    return value
