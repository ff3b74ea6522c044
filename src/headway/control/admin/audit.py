"""``GET /admin/audit``: the registry's append-only log of every write, newest first.

Filters: ``actor`` (an admin key id, ``cli:<user>``, ``rollout:<gateway>``), ``action``
(exact, or a prefix ending in a dot: ``rollout.``), ``target`` (``tenant:search-app``),
``since`` (inclusive) and ``until`` (exclusive), each a date or an RFC 3339 time as
``/v1/usage`` takes them; ``limit`` (1 to ``MAX_LIMIT``, default 100) and ``before_id``
to page back: pass the last entry's id.
"""

from __future__ import annotations

from typing import Any

import msgspec

from headway.control.admin.access import ADMIN_ONLY, MAX_ID, AdminParts, query_values, read
from headway.control.usage import parse_time
from headway.errors import ValidationFailed
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import query_limit, whole_number
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.model import AuditEntry, AuditQuery
from headway.utc import rfc3339

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_PARAMETERS = frozenset({"actor", "action", "target", "since", "until", "limit", "before_id"})


class AuditAnswer(msgspec.Struct):
    id: int
    at: str
    actor: str
    action: str
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    request_id: str


class AuditList(msgspec.Struct):
    data: list[AuditAnswer]


def audit_query(params: dict[str, str]) -> AuditQuery:
    """The query of ``params``, checked (``ValidationFailed`` says what is wrong)."""
    since = parse_time(params["since"], "since") if "since" in params else None
    until = parse_time(params["until"], "until") if "until" in params else None
    limit = query_limit(params.get("limit"), default=DEFAULT_LIMIT, most=MAX_LIMIT)
    before = params.get("before_id")
    before_id = None if before is None else whole_number(before, "before_id", least=0, most=MAX_ID)
    return AuditQuery(
        actor=params.get("actor") or None,
        action=params.get("action") or None,
        target=params.get("target") or None,
        since=since,
        until=until,
        limit=limit,
        before_id=before_id,
    )


def audit_answer(entry: AuditEntry) -> AuditAnswer:
    return AuditAnswer(
        entry.id,
        rfc3339(entry.at),
        entry.actor,
        entry.action,
        entry.target,
        entry.before,
        entry.after,
        entry.request_id,
    )


def list_audit(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        query = audit_query(query_values(request, _PARAMETERS))
        entries = await read(parts, request, lambda store: store.audit(query))
        return json_response(AuditList([audit_answer(entry) for entry in entries]))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    return [
        DocumentedRoute(
            Route("GET", "/admin/audit", "admin_audit", list_audit(parts), auth=ADMIN_KEY),
            Operation(
                "Every registry write, newest first: who, what, before and after (admin key)",
                AuditList,
                errors=(*ADMIN_ONLY, ValidationFailed),
                authenticated=True,
                query=_query_parameters(),
            ),
        )
    ]


def _query_parameters() -> list[dict[str, Any]]:
    time_schema = {
        "anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]
    }
    text = {"type": "string"}
    whole = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
    described = {
        "actor": (text, "An admin key id, cli:<user> or rollout:<gateway>."),
        "action": (text, "Exact (tenant.create), or a prefix ending in a dot (rollout.)."),
        "target": (text, "The resource written (tenant:search-app, alias:minilm)."),
        "since": (time_schema, "Inclusive: a date (midnight UTC) or an RFC 3339 time."),
        "until": (time_schema, "Exclusive: a date (midnight UTC) or an RFC 3339 time."),
        "limit": (
            {**whole, "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            "At most.",
        ),
        "before_id": (whole, "Entries older than this id (the last one of the page before)."),
    }
    return [
        {"name": name, "in": "query", "required": False, "schema": schema, "description": says}
        for name, (schema, says) in described.items()
    ]
