"""The console's writes, the two on-call needs, through the admin API's registry calls.

``admin/access.write`` runs them in a thread, maps refusals to 4xx and reloads this
gateway's snapshot after; the audit log's actor is the session's key id and the
request id:

- ``POST /console/api/tenants/{name}``: a tenant's tier or quota (``TenantUpdate``);
- ``POST /console/api/rollouts/{id}/{pause|resume|abort}``.
"""

from __future__ import annotations

import msgspec

from headway.gateway.admin.access import AdminParts, path_id, write
from headway.gateway.admin.body import decode_body
from headway.gateway.admin.tenants import TenantUpdate, tenant_answer
from headway.gateway.console.api import rollout_answer
from headway.gateway.console.auth import ConsoleHandler
from headway.gateway.console.parts import ConsoleParts
from headway.gateway.console.session import Session
from headway.http.asgi import Request, Response, json_response
from headway.registry.model import Actor

MOVES = ("pause", "resume", "abort")
_update = msgspec.json.Decoder(TenantUpdate)


def update_tenant(parts: ConsoleParts) -> ConsoleHandler:
    admin = AdminParts(parts.snapshots, parts.store)

    async def handle(request: Request, session: Session) -> Response:
        name = request.path_params["name"]
        body = decode_body(request, _update)
        actor = Actor(session.key_id, request.id)
        tenant = await write(
            admin,
            lambda store: store.update_tenant(
                name,
                actor=actor,
                tier=body.tier,
                rate_texts_per_s=body.rate_texts_per_s,
                burst_texts=body.burst_texts,
            ),
        )
        return json_response(tenant_answer(tenant))

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
