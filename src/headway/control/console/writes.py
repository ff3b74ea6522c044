"""The console's writes, the two on-call needs, through the admin API's registry calls.

``admin/access.write`` runs them in a thread, maps refusals to 4xx and reloads this
gateway's snapshot after; the audit log's actor is the session's key id and the
request id:

- ``POST /console/api/tenants/{name}``: a tenant's tier or quota (``TenantUpdate``);
- ``POST /console/api/rollouts/{id}/{pause|resume|abort}``.
"""

from __future__ import annotations

from headway.control.admin.access import AdminParts, path_id, write
from headway.control.admin.tenants import apply_update
from headway.control.console.api import rollout_answer
from headway.control.console.auth import ConsoleHandler
from headway.control.console.parts import ConsoleParts
from headway.control.console.session import Session
from headway.http.asgi import Request, Response, json_response
from headway.registry.model import Actor

MOVES = ("pause", "resume", "abort")


def update_tenant(parts: ConsoleParts) -> ConsoleHandler:
    admin = AdminParts(parts.snapshots, parts.store)

    async def handle(request: Request, session: Session) -> Response:
        return await apply_update(admin, request, Actor(session.key_id, request.id))

    return handle


def move_rollout(parts: ConsoleParts, verb: str) -> ConsoleHandler:
    admin = AdminParts(parts.snapshots, parts.store)

    async def handle(request: Request, session: Session) -> Response:
        from headway.rollouts import operations

        move = {"pause": operations.pause, "resume": operations.resume, "abort": operations.abort}
        rollout_id = path_id(request)
        actor = Actor(session.key_id, request.id)
        rollout = await write(admin, lambda store: move[verb](store, rollout_id, actor=actor))
        return json_response(rollout_answer(rollout))

    return handle
