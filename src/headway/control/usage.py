"""``GET /v1/usage`` (a tenant's own) and ``GET /admin/usage`` (every tenant's), from the ledger.

Query: ``start`` (required) and ``end`` (default: now), each a date (``2026-11-01``,
midnight UTC) or an RFC 3339 time with its offset (``2026-11-01T10:00:00Z``); ``end``
is exclusive and after ``start``, at most ``MAX_RANGE_DAYS`` later; ``group_by`` is
``hour``, ``day`` (the default) or ``model``; ``/admin/usage`` also takes ``tenant``
(a name: the tenant of that name now) or ``tenant_id`` (any id, a deleted tenant's
too; 0 is the usage recorded by name before usage carried ids). Hours are the
ledger's unit: the range covers every hour that starts in it (a ``start`` inside an
hour includes that hour). Anything else is a 422 that says what is wrong. A tenant
never sees another's usage: its key chooses the tenant, by id, so a tenant created
with a deleted one's name starts with none; ``/v1/usage`` takes no ``tenant``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast, get_args

import msgspec

from headway.billing.ledger.base import GroupBy, UsageQuery, UsageRow
from headway.control.ledger import LedgerOf
from headway.control.mount import Mount
from headway.errors import Forbidden, Unauthorized, UsageUnavailable, ValidationFailed
from headway.gateway.auth.kinds import ADMIN_KEY, TENANT_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import one_each
from headway.gateway.service import GatewayService
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.authenticate import caller_of
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.utc import rfc3339

log = logging.getLogger(__name__)

MAX_RANGE_DAYS = 366
MAX_TENANT_ID = 2**63 - 1
GROUPS: tuple[str, ...] = get_args(GroupBy)
_PARAMETERS = {"start", "end", "group_by"}
_ADMIN_PARAMETERS = _PARAMETERS | {"tenant", "tenant_id"}


class UsageEntry(msgspec.Struct):
    """Billable usage of one tenant in one period (``group_by=hour|day``), or of one
    model version over the whole range (``group_by=model``). A tenant is its id: one
    created with a deleted tenant's name has usage of its own (0: usage recorded, by
    name, before usage carried tenant ids)."""

    tenant_id: int
    tenant: str
    period_start: str
    """RFC 3339, UTC: the hour's or the day's start; for ``model``, the range's start."""
    model: str | None
    version: str | None
    requests: int
    texts: int
    tokens: int


class Usage(msgspec.Struct):
    """Usage in ``[start, end)`` from the ledger (what has been billed so far)."""

    start: str
    end: str
    group_by: Literal["hour", "day", "model"]
    data: list[UsageEntry]
    object: str = "list"


def usage_mount(service: GatewayService, ledger: LedgerOf) -> Mount:
    snapshots, wall_clock = service.snapshots, service.meter.wall_clock
    errors = (Unauthorized, Forbidden, ValidationFailed, UsageUnavailable)
    return Mount(
        [
            DocumentedRoute(
                Route(
                    "GET",
                    "/v1/usage",
                    "usage",
                    tenant_usage(snapshots, ledger, wall_clock),
                    auth=TENANT_KEY,
                ),
                Operation(
                    "The tenant's own billed usage, by hour, day or model",
                    Usage,
                    errors=errors,
                    authenticated=True,
                    query=query_parameters(admin=False),
                ),
            ),
            DocumentedRoute(
                Route(
                    "GET",
                    "/admin/usage",
                    "admin_usage",
                    admin_usage(snapshots, ledger, wall_clock),
                    auth=ADMIN_KEY,
                ),
                Operation(
                    "Every tenant's billed usage, by hour, day or model (admin key)",
                    Usage,
                    errors=errors,
                    authenticated=True,
                    query=query_parameters(admin=True),
                ),
            ),
        ]
    )


TenantNamed = Callable[[str], int | None]
"""The id of the tenant of that name now (None: there is none)."""


def parse_time(value: str, name: str) -> float:
    """A date (midnight UTC) or an RFC 3339 time with an offset → unix seconds."""
    try:
        if len(value) == 10:
            day = dt.date.fromisoformat(value)
            return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()
        when = dt.datetime.fromisoformat(value.replace("z", "Z"))
        if when.tzinfo is None:
            raise ValueError("no offset")
        return when.timestamp()
    except (ValueError, OverflowError) as exc:
        raise ValidationFailed(
            f"{name} {value[:40]!r} is not a date (2026-11-01) or an RFC 3339 time with an "
            "offset (2026-11-01T10:00:00Z)"
        ) from exc


def _nobody(name: str) -> int | None:
    return None


def usage_query(
    params: Mapping[str, Sequence[str]],
    tenant_id: int | None,
    now: float,
    *,
    admin: bool,
    tenant_named: TenantNamed = _nobody,
) -> UsageQuery:
    """The query of ``params``, checked (``ValidationFailed`` says what is wrong)."""
    one = one_each(params, _ADMIN_PARAMETERS if admin else _PARAMETERS)
    if "start" not in one:
        raise ValidationFailed("start is required: a date (2026-11-01) or an RFC 3339 time")
    start = parse_time(one["start"], "start")
    end = parse_time(one["end"], "end") if "end" in one else now
    if end <= start:
        raise ValidationFailed("end must be after start (end is exclusive)")
    if end - start > MAX_RANGE_DAYS * 86400:
        raise ValidationFailed(f"the range is longer than {MAX_RANGE_DAYS} days; ask in parts")
    group_by = one.get("group_by", "day")
    if group_by not in GROUPS:
        raise ValidationFailed(f"group_by {group_by[:20]!r} is not one of {', '.join(GROUPS)}")
    if admin:
        tenant_id = _asked_tenant(one, tenant_named)
    return UsageQuery(start, end, cast(GroupBy, group_by), tenant_id)


def _asked_tenant(one: Mapping[str, str], tenant_named: TenantNamed) -> int | None:
    """The operator's ``tenant`` (a name, now) or ``tenant_id``; None: every tenant."""
    if "tenant" in one and "tenant_id" in one:
        raise ValidationFailed("give tenant or tenant_id, not both")
    if "tenant_id" in one:
        value = one["tenant_id"]
        if not (value.isascii() and value.isdigit() and len(value) <= 19):
            raise ValidationFailed(f"tenant_id {value[:40]!r} is not a whole number")
        if int(value) > MAX_TENANT_ID:
            raise ValidationFailed(f"tenant_id must be at most {MAX_TENANT_ID}")
        return int(value)
    name = one.get("tenant") or None
    if name is None:
        return None
    found = tenant_named(name)
    if found is None:
        raise ValidationFailed(
            f"no tenant is named {name[:64]!r} now; ask for a deleted tenant's usage by "
            "its tenant_id"
        )
    return found


def usage_answer(query: UsageQuery, rows: Sequence[UsageRow]) -> Usage:
    data = [
        UsageEntry(
            row.tenant_id,
            row.tenant,
            rfc3339(row.period),
            row.alias,
            row.version,
            row.requests,
            row.texts,
            row.tokens,
        )
        for row in rows
    ]
    return Usage(rfc3339(query.start), rfc3339(query.end), query.group_by, data)


def tenant_usage(
    snapshots: Snapshots, ledger: LedgerOf, wall_clock: Callable[[], float]
) -> Handler:
    async def handle(request: Request) -> Response:
        tenant = caller_of(request).tenant
        query = usage_query(request.query(), tenant.id, wall_clock(), admin=False)
        return await _answer(query, ledger)

    return handle


def admin_usage(snapshots: Snapshots, ledger: LedgerOf, wall_clock: Callable[[], float]) -> Handler:
    async def handle(request: Request) -> Response:
        def tenant_named(name: str) -> int | None:
            tenant = snapshots.current.tenants.get(name)
            return None if tenant is None else tenant.id

        query = usage_query(
            request.query(), None, wall_clock(), admin=True, tenant_named=tenant_named
        )
        return await _answer(query, ledger)

    return handle


async def _answer(query: UsageQuery, ledger_of: LedgerOf) -> Response:
    ledger = ledger_of()
    if ledger is None:
        raise UsageUnavailable("this gateway has no usage ledger open")
    try:
        rows = await ledger.usage(query)
    except Exception as exc:
        log.warning("usage ledger read failed: %s", exc)
        raise UsageUnavailable("the usage ledger cannot be read now; retry later") from exc
    return json_response(usage_answer(query, rows))


def query_parameters(admin: bool) -> list[dict[str, Any]]:
    """The OpenAPI description of the parameters ``usage_query`` reads."""
    time_schema = {
        "anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]
    }
    described: list[dict[str, Any]] = [
        {
            "name": "start",
            "in": "query",
            "required": True,
            "schema": time_schema,
            "description": "Inclusive: a date (midnight UTC) or an RFC 3339 time with an offset.",
        },
        {
            "name": "end",
            "in": "query",
            "required": False,
            "schema": time_schema,
            "description": f"Exclusive, after start, at most {MAX_RANGE_DAYS} days later "
            "(default: now).",
        },
        {
            "name": "group_by",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "enum": list(GROUPS), "default": "day"},
        },
    ]
    if admin:
        described += [
            {
                "name": "tenant",
                "in": "query",
                "required": False,
                "schema": {"type": "string"},
                "description": "The usage of the tenant of that name now (default: every "
                "tenant's).",
            },
            {
                "name": "tenant_id",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 0, "maximum": MAX_TENANT_ID},
                "description": "One tenant's usage by its id, a deleted tenant's too (0: "
                "usage recorded by name before usage carried tenant ids). Not with tenant.",
            },
        ]
    return described
