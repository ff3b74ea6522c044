"""``/admin/aliases``: which version each alias names.

``PUT /admin/aliases/{alias}`` points an alias (new or not) at one version, given by
its hash, never by another alias (an alias of an alias would move when the other
moves); it removes any split on the alias, and is refused while a rollout owns it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from headway.control.admin.access import ADMIN_ONLY, WITH_BODY, AdminParts, admin_actor, read, write
from headway.control.admin.body import decode_body
from headway.errors import Conflict, NotFound
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.store import RegistryStore

VersionHash = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
"""A model version: the SHA-256 of what decides its outputs, in hex."""


class AliasTarget(msgspec.Struct, forbid_unknown_fields=True):
    version: VersionHash


class AliasEntry(msgspec.Struct):
    alias: str
    version: str
    split: bool
    """Whether a split spreads the alias's traffic over more versions than this one."""


class AliasList(msgspec.Struct):
    data: list[AliasEntry]


_target = msgspec.json.Decoder(AliasTarget)


def alias_entries(store: RegistryStore) -> list[AliasEntry]:
    split = {s.alias for s in store.splits()}
    return sorted(
        (
            AliasEntry(alias, record.version, alias in split)
            for record, aliases in store.models()
            for alias in aliases
        ),
        key=lambda entry: entry.alias,
    )


def list_aliases(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        return json_response(AliasList(await read(parts, request, alias_entries)))

    return handle


def set_alias(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        alias = request.path_params["alias"]
        body = decode_body(request, _target)
        await write(parts, lambda store: store.set_alias(alias, body.version, actor=actor))
        return json_response(AliasEntry(alias, body.version, split=False))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    return [
        DocumentedRoute(
            Route(
                "GET", "/admin/aliases", "admin_aliases_list", list_aliases(parts), auth=ADMIN_KEY
            ),
            Operation(
                "Every alias and the version it names (admin key)",
                AliasList,
                errors=ADMIN_ONLY,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "PUT", "/admin/aliases/{alias}", "admin_alias_set", set_alias(parts), auth=ADMIN_KEY
            ),
            Operation(
                "Point an alias at a version (by hash); removes its split (admin key)",
                AliasEntry,
                AliasTarget,
                (*WITH_BODY, NotFound, Conflict),
                authenticated=True,
            ),
        ),
    ]
