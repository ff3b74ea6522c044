"""``/admin/tenants``: tenants, their tier and quota, their Batch API bounds, and their
API keys.

A tenant's key is shown once, in the answer that creates it (the registry keeps only
its digest); listings give key ids and dates, never keys. Rotation issues a new key
and lets the others live ``overlap_s`` more (0: refused at once), so clients can move
over without an outage. Deleting a tenant revokes its keys at once (on this gateway
from the next request); its usage ledger rows are kept, since they are what it is
billed for.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from headway.control.admin.access import (
    ADMIN_ONLY,
    WITH_BODY,
    AdminParts,
    admin_actor,
    read,
    write,
)
from headway.control.admin.body import decode_body
from headway.errors import Conflict, NotFound
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.errors import UnknownKey
from headway.registry.keys import key_digest
from headway.registry.model import (
    BATCH_LIMITS,
    TENANT_NAME_PATTERN,
    Actor,
    ApiKey,
    Tenant,
    TenantDeletion,
    key_id_of,
)
from headway.registry.store import RegistryStore
from headway.utc import rfc3339

DEFAULT_OVERLAP_S = 3600.0
MAX_OVERLAP_S = 366 * 86400.0
"""A rotation that leaves the old key alive longer than a year is no rotation."""

TenantName = Annotated[str, msgspec.Meta(pattern=TENANT_NAME_PATTERN)]
Quota = Annotated[float, msgspec.Meta(gt=0)]
Limit = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
TierName = Literal["interactive", "batch"]


class TenantCreate(msgspec.Struct, forbid_unknown_fields=True):
    """A new tenant; a quota left out takes the tier's default, a Batch API bound left out
    (or null) the gateway's setting (``batches.max_files_per_tenant`` and its neighbours)."""

    name: TenantName
    tier: TierName = "interactive"
    rate_texts_per_s: Quota | None = None
    burst_texts: Quota | None = None
    max_files: Limit | None = None
    max_stored_bytes: Limit | None = None
    max_open_batches: Limit | None = None


class TenantUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """What to change; a field left out stays as it is. A Batch API bound given as null goes
    back to the gateway's setting."""

    tier: TierName | None = None
    rate_texts_per_s: Quota | None = None
    burst_texts: Quota | None = None
    max_files: Limit | msgspec.UnsetType | None = msgspec.UNSET
    max_stored_bytes: Limit | msgspec.UnsetType | None = msgspec.UNSET
    max_open_batches: Limit | msgspec.UnsetType | None = msgspec.UNSET

    def batch_limits(self) -> dict[str, int | None]:
        """The Batch API bounds it changes, by name (None: back to the setting)."""
        given = {name: getattr(self, name) for name in BATCH_LIMITS}
        return {name: value for name, value in given.items() if value is not msgspec.UNSET}


class KeyRotation(msgspec.Struct, forbid_unknown_fields=True):
    overlap_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_OVERLAP_S)] = DEFAULT_OVERLAP_S
    """How long the tenant's other live keys keep working (0: refused at once)."""


class TenantAnswer(msgspec.Struct, omit_defaults=True):
    """A tenant; a Batch API bound appears only where the tenant has its own (absent: the
    gateway's setting)."""

    name: str
    tier: str
    rate_texts_per_s: float
    burst_texts: float
    max_files: int | None = None
    max_stored_bytes: int | None = None
    max_open_batches: int | None = None


class TenantList(msgspec.Struct):
    data: list[TenantAnswer]


class KeyAnswer(msgspec.Struct):
    """A key by its id and dates: the key itself is never shown again."""

    key_id: str
    role: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None


class KeyList(msgspec.Struct):
    data: list[KeyAnswer]


class TenantCreated(msgspec.Struct):
    """The tenant and its first API key: shown this once, stored only as a digest."""

    tenant: TenantAnswer
    key: str
    key_id: str


class KeyCreated(msgspec.Struct):
    """The new API key, shown this once; the tenant's other keys work ``overlap_s`` more."""

    key: str
    key_id: str
    created_at: str
    overlap_s: float


class TenantDeleted(msgspec.Struct):
    """The tenant is gone and every key of it refused; its usage stays in the ledger
    (``usage_kept``), which is what it is billed for. ``data_deleted``: its batches,
    files and cache entries are gone; false: the gateways finish deleting them shortly.
    The name is free at once (what is left is the old id's, out of a new tenant's
    reach)."""

    tenant: TenantAnswer
    data_deleted: bool
    keys_revoked: bool = True
    usage_kept: bool = True


_create = msgspec.json.Decoder(TenantCreate)
_update = msgspec.json.Decoder(TenantUpdate)
_rotation = msgspec.json.Decoder(KeyRotation)


def tenant_answer(tenant: Tenant) -> TenantAnswer:
    limits = tenant.batch_limits
    return TenantAnswer(
        tenant.name,
        tenant.tier,
        tenant.rate_texts_per_s,
        tenant.burst_texts,
        limits.max_files,
        limits.max_stored_bytes,
        limits.max_open_batches,
    )


def key_answer(key: ApiKey) -> KeyAnswer:
    return KeyAnswer(
        key.key_id,
        key.role,
        rfc3339(key.created_at),
        None if key.expires_at is None else rfc3339(key.expires_at),
        None if key.revoked_at is None else rfc3339(key.revoked_at),
    )


def list_tenants(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        tenants = await read(parts, request, lambda store: store.tenants())
        return json_response(TenantList([tenant_answer(t) for t in tenants]))

    return handle


def create_tenant(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        body = decode_body(request, _create)
        tenant, key = await write(
            parts,
            lambda store: store.add_tenant(
                body.name,
                body.tier,
                actor=actor,
                rate_texts_per_s=body.rate_texts_per_s,
                burst_texts=body.burst_texts,
                batch_limits={
                    "max_files": body.max_files,
                    "max_stored_bytes": body.max_stored_bytes,
                    "max_open_batches": body.max_open_batches,
                },
            ),
        )
        key_id = key_id_of(key_digest(key))
        return json_response(TenantCreated(tenant_answer(tenant), key, key_id), 201)

    return handle


def get_tenant(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        name = request.path_params["name"]
        tenant = await read(parts, request, lambda store: store.tenant(name))
        return json_response(tenant_answer(tenant))

    return handle


def update_tenant(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        return await apply_update(parts, request, actor)

    return handle


async def apply_update(parts: AdminParts, request: Request, actor: Actor) -> Response:
    """A tenant's tier, quota or Batch API bounds from the request's body (``TenantUpdate``),
    by ``actor``;
    the admin API's and the console's."""
    name = request.path_params["name"]
    body = decode_body(request, _update)
    tenant = await write(
        parts,
        lambda store: store.update_tenant(
            name,
            actor=actor,
            tier=body.tier,
            rate_texts_per_s=body.rate_texts_per_s,
            burst_texts=body.burst_texts,
            batch_limits=body.batch_limits(),
        ),
    )
    return json_response(tenant_answer(tenant))


def delete_tenant(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        name = request.path_params["name"]
        tenant = await write(parts, lambda store: store.delete_tenant(name, actor=actor))
        deletion = TenantDeletion(tenant.id, tenant.name, 0.0, None, None)
        finished = await parts.finish_deletion(deletion)
        return json_response(TenantDeleted(tenant_answer(tenant), finished))

    return handle


def list_keys(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        name = request.path_params["name"]
        keys = await read(parts, request, lambda store: store.keys(name))
        return json_response(KeyList([key_answer(key) for key in keys]))

    return handle


def rotate_key(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        name = request.path_params["name"]
        body = decode_body(request, _rotation)
        record, key = await write(
            parts, lambda store: store.rotate_key(name, actor=actor, overlap_s=body.overlap_s)
        )
        answer = KeyCreated(key, record.key_id, rfc3339(record.created_at), body.overlap_s)
        return json_response(answer, 201)

    return handle


def revoke_key(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        name, key_id = request.path_params["name"], request.path_params["key_id"]

        def revoke(store: RegistryStore) -> ApiKey:
            # The path names the tenant, so a key of another tenant is not found here.
            if all(key.key_id != key_id for key in store.keys(name)):
                raise UnknownKey(f"tenant {name!r} has no key {key_id[:40]!r}")
            return store.revoke_key(key_id, actor=actor)

        return json_response(key_answer(await write(parts, revoke)))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    one, keys = "/admin/tenants/{name}", "/admin/tenants/{name}/keys"
    found = (*ADMIN_ONLY, NotFound)
    return [
        DocumentedRoute(
            Route(
                "GET", "/admin/tenants", "admin_tenants_list", list_tenants(parts), auth=ADMIN_KEY
            ),
            Operation(
                "Every tenant, its tier and quota (admin key)",
                TenantList,
                errors=ADMIN_ONLY,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "POST",
                "/admin/tenants",
                "admin_tenant_create",
                create_tenant(parts),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Create a tenant; its first API key is in the answer, once (admin key)",
                TenantCreated,
                TenantCreate,
                (*WITH_BODY, Conflict),
                authenticated=True,
                status=201,
            ),
        ),
        DocumentedRoute(
            Route("GET", one, "admin_tenant_get", get_tenant(parts), auth=ADMIN_KEY),
            Operation("One tenant (admin key)", TenantAnswer, errors=found, authenticated=True),
        ),
        DocumentedRoute(
            Route("PATCH", one, "admin_tenant_update", update_tenant(parts), auth=ADMIN_KEY),
            Operation(
                "Change a tenant's tier, quota or Batch API bounds (admin key)",
                TenantAnswer,
                TenantUpdate,
                (*WITH_BODY, NotFound),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("DELETE", one, "admin_tenant_delete", delete_tenant(parts), auth=ADMIN_KEY),
            Operation(
                "Delete a tenant: its keys are refused at once, its usage ledger is "
                "kept (admin key)",
                TenantDeleted,
                errors=found,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("GET", keys, "admin_keys_list", list_keys(parts), auth=ADMIN_KEY),
            Operation(
                "A tenant's keys: ids and dates, never the keys (admin key)",
                KeyList,
                errors=found,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("POST", keys, "admin_key_rotate", rotate_key(parts), auth=ADMIN_KEY),
            Operation(
                "A new key for the tenant; its other keys expire after overlap_s (admin key)",
                KeyCreated,
                KeyRotation,
                (*WITH_BODY, NotFound),
                authenticated=True,
                status=201,
            ),
        ),
        DocumentedRoute(
            Route(
                "DELETE", keys + "/{key_id}", "admin_key_revoke", revoke_key(parts), auth=ADMIN_KEY
            ),
            Operation(
                "Revoke one of the tenant's keys now (admin key)",
                KeyAnswer,
                errors=found,
                authenticated=True,
            ),
        ),
    ]
