"""``/admin/splits``: an alias's traffic spread over versions.

``PUT /admin/splits/{alias}`` replaces the split: relative ``weights`` per version,
how a caller is kept on one version (``sticky``), per-tenant ``pins`` that override
the weights, and an optional ``shadow`` copy. The alias must exist (404); a version
or tenant the body names that does not exist is the body's fault (422, naming the
field). While a rollout owns the alias, its split is the rollout's (409).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from headway.control.admin.access import ADMIN_ONLY, WITH_BODY, AdminParts, admin_actor, read, write
from headway.control.admin.body import decode_body
from headway.errors import Conflict, NotFound, ValidationFailed
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.errors import UnknownModel
from headway.registry.model import Shadow, Split
from headway.registry.store import RegistryStore

Weight = Annotated[float, msgspec.Meta(gt=0)]


class ShadowBody(msgspec.Struct, forbid_unknown_fields=True):
    version: str
    share: Annotated[float, msgspec.Meta(gt=0, le=1)]
    """The fraction of the alias's requests copied to ``version`` (never awaited, never
    billed)."""


class SplitBody(msgspec.Struct, forbid_unknown_fields=True):
    weights: Annotated[dict[str, Weight], msgspec.Meta(min_length=1)]
    """Version → relative weight (they need not sum to 1)."""
    sticky: Literal["tenant", "user", "none"] = "tenant"
    pins: dict[str, str] = {}
    """Tenant name → the version it always gets."""
    shadow: ShadowBody | None = None


class SplitAnswer(msgspec.Struct):
    alias: str
    weights: dict[str, float]
    sticky: str
    pins: dict[str, str]
    shadow: ShadowBody | None


class SplitList(msgspec.Struct):
    data: list[SplitAnswer]


_split = msgspec.json.Decoder(SplitBody)


def split_answer(split: Split) -> SplitAnswer:
    shadow = split.shadow
    return SplitAnswer(
        split.alias,
        dict(split.weights),
        split.sticky,
        dict(split.pins),
        None if shadow is None else ShadowBody(shadow.version, shadow.share),
    )


def split_of(alias: str, body: SplitBody) -> Split:
    shadow = None if body.shadow is None else Shadow(body.shadow.version, body.shadow.share)
    return Split(alias, tuple(body.weights.items()), body.sticky, tuple(body.pins.items()), shadow)


def check_names(split: Split, versions: set[str], tenants: set[str]) -> None:
    """Every version and tenant the body names exists (``ValidationFailed`` names the field)."""
    named = [(f"weights.{version}", version) for version, _ in split.weights]
    named += [(f"pins.{tenant}", version) for tenant, version in split.pins]
    if split.shadow is not None:
        named.append(("shadow.version", split.shadow.version))
    for field, version in named:
        if version not in versions:
            raise ValidationFailed(f"`{field[:120]}`: no model version {version[:80]!r}")
    for tenant, _ in split.pins:
        if tenant not in tenants:
            raise ValidationFailed(f"`pins.{tenant[:80]}`: no tenant of that name")


def find_split(store: RegistryStore, alias: str) -> Split:
    for split in store.splits():
        if split.alias == alias:
            return split
    raise UnknownModel(f"alias {alias[:80]!r} has no split")


def list_splits(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        splits = await read(parts, request, lambda store: store.splits())
        return json_response(SplitList([split_answer(split) for split in splits]))

    return handle


def get_split(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        alias = request.path_params["alias"]
        return json_response(
            split_answer(await read(parts, request, lambda s: find_split(s, alias)))
        )

    return handle


def set_split(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        alias = request.path_params["alias"]
        split = split_of(alias, decode_body(request, _split))

        def replace(store: RegistryStore) -> Split:
            if store.resolve_model(alias) is None:
                raise UnknownModel(f"no alias {alias[:80]!r}")
            versions = {record.version for record, _ in store.models()}
            check_names(split, versions, {tenant.name for tenant in store.tenants()})
            return store.set_split(split, actor=actor)

        return json_response(split_answer(await write(parts, replace)))

    return handle


def delete_split(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        alias = request.path_params["alias"]

        def remove(store: RegistryStore) -> Split:
            split = find_split(store, alias)
            store.delete_split(alias, actor=actor)
            return split

        return json_response(split_answer(await write(parts, remove)))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    one = "/admin/splits/{alias}"
    found = (*ADMIN_ONLY, NotFound)
    return [
        DocumentedRoute(
            Route("GET", "/admin/splits", "admin_splits_list", list_splits(parts), auth=ADMIN_KEY),
            Operation(
                "Every alias's split (admin key)", SplitList, errors=ADMIN_ONLY, authenticated=True
            ),
        ),
        DocumentedRoute(
            Route("GET", one, "admin_split_get", get_split(parts), auth=ADMIN_KEY),
            Operation(
                "One alias's split (admin key)", SplitAnswer, errors=found, authenticated=True
            ),
        ),
        DocumentedRoute(
            Route("PUT", one, "admin_split_set", set_split(parts), auth=ADMIN_KEY),
            Operation(
                "Replace an alias's split (admin key)",
                SplitAnswer,
                SplitBody,
                (*WITH_BODY, NotFound, Conflict),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("DELETE", one, "admin_split_delete", delete_split(parts), auth=ADMIN_KEY),
            Operation(
                "Remove an alias's split: it serves its primary version alone (admin key)",
                SplitAnswer,
                errors=(*found, Conflict),
                authenticated=True,
            ),
        ),
    ]
