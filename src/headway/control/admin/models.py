"""``/admin/models``: every model version the registry holds, and who serves it.

A version is a content hash; its ``aliases`` are the names whose primary it is, and
``served_by`` the replicas that advertise it now (from their last ``/readyz``); a derived
one (int8) says how it agrees with its source. ``PUT /admin/models/{version}/gate`` sets
what a variant derived from the version must reach for a rollout to promote it
(``rollouts/gate.py``); ``DELETE`` removes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Annotated

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
from headway.errors import NotFound
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.pool import Replica
from headway.gateway.pools import Pools
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.model import ModelRecord, VariantGate
from headway.utc import rfc3339

Share = Annotated[float, msgspec.Meta(ge=0, le=1)]


class VariantGateBody(msgspec.Struct, forbid_unknown_fields=True):
    """The least a variant of this version must agree with it on the reference texts."""

    min_mean_cosine: Share = 0.0
    min_nn_agreement: Share = 0.0


class AgreementView(msgspec.Struct):
    source: str
    texts: int
    mean_cosine: float
    min_cosine: float
    nn_agreement: float


class ModelVersion(msgspec.Struct):
    version: str
    name: str
    kind: str
    dimensions: int
    quantization: str
    size_bytes: int
    created_at: str
    max_tokens: int
    """The most tokens the model reads of a text; 0: not recorded."""
    matryoshka_dimensions: list[int]
    """Narrower widths a request may ask for (``dimensions``); empty: only ``dimensions``."""
    aliases: list[str]
    """The aliases whose primary version this is."""
    served_by: list[str]
    """The URLs of the replicas that advertise it now."""
    agreement: AgreementView | None = None
    """A derived version's agreement with its source; null: not derived."""
    variant_gate: VariantGateBody | None = None
    """What its variants must reach to be promoted; null: no gate."""


class ModelVersionList(msgspec.Struct):
    data: list[ModelVersion]


def advertised(replica: Replica) -> frozenset[str]:
    """The versions a replica says it serves; one that lists none (a worker of one model,
    from before workers listed theirs) serves its ``model_version``, if it has said one."""
    if replica.versions:
        return replica.versions
    return frozenset({replica.model_version}) if replica.model_version else frozenset()


def served_by(pools: Pools) -> dict[str, list[str]]:
    """Version → the URLs of the replicas that advertise it, sorted."""
    urls: dict[str, list[str]] = {}
    for pool in pools:
        for replica in pool.replicas:
            for version in advertised(replica):
                urls.setdefault(version, []).append(replica.url)
    return {version: sorted(found) for version, found in urls.items()}


def model_version(
    record: ModelRecord, aliases: Iterable[str], urls: dict[str, list[str]]
) -> ModelVersion:
    return ModelVersion(
        record.version,
        record.name,
        record.kind,
        record.dimensions,
        record.quantization,
        record.size_bytes,
        rfc3339(record.created_at),
        record.max_tokens,
        list(record.matryoshka_dimensions),
        sorted(aliases),
        urls.get(record.version, []),
        None if record.agreement is None else AgreementView(**record.agreement.to_json()),
        None if record.variant_gate is None else VariantGateBody(**asdict(record.variant_gate)),
    )


def list_models(parts: AdminParts, pools: Pools) -> Handler:
    async def handle(request: Request) -> Response:
        models = await read(parts, request, lambda store: store.models())
        urls = served_by(pools)
        data = [model_version(record, aliases, urls) for record, aliases in models]
        return json_response(ModelVersionList(data))

    return handle


def get_model(parts: AdminParts, pools: Pools) -> Handler:
    async def handle(request: Request) -> Response:
        version = request.path_params["version"]
        return json_response(await _described(parts, request, pools, version))

    return handle


async def _described(
    parts: AdminParts, request: Request, pools: Pools, version: str
) -> ModelVersion:
    models = await read(parts, request, lambda store: store.models())
    for record, aliases in models:
        if record.version == version:
            return model_version(record, aliases, served_by(pools))
    raise NotFound(f"no model version {version[:80]!r}")


_gate = msgspec.json.Decoder(VariantGateBody)


def gate_handler(parts: AdminParts, pools: Pools, *, remove: bool) -> Handler:
    """``PUT`` (the body's gate) or ``DELETE`` (none) of ``/admin/models/{version}/gate``."""

    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        version = request.path_params["version"]
        gate = None
        if not remove:
            body = decode_body(request, _gate)
            gate = VariantGate(body.min_mean_cosine, body.min_nn_agreement)
        await write(parts, lambda store: store.set_variant_gate(version, gate, actor=actor))
        return json_response(await _described(parts, request, pools, version))

    return handle


def routes(parts: AdminParts, pools: Pools) -> list[DocumentedRoute]:
    return [
        DocumentedRoute(
            Route(
                "GET",
                "/admin/models",
                "admin_models_list",
                list_models(parts, pools),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Every model version, its aliases and the replicas serving it (admin key)",
                ModelVersionList,
                errors=ADMIN_ONLY,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/admin/models/{version}",
                "admin_model_get",
                get_model(parts, pools),
                auth=ADMIN_KEY,
            ),
            Operation(
                "One model version by its hash (admin key)",
                ModelVersion,
                errors=(*ADMIN_ONLY, NotFound),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "PUT",
                "/admin/models/{version}/gate",
                "admin_model_gate_set",
                gate_handler(parts, pools, remove=False),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Set what a variant of this version must agree with it to be promoted (admin key)",
                ModelVersion,
                VariantGateBody,
                (*WITH_BODY, NotFound),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route(
                "DELETE",
                "/admin/models/{version}/gate",
                "admin_model_gate_delete",
                gate_handler(parts, pools, remove=True),
                auth=ADMIN_KEY,
            ),
            Operation(
                "Remove this version's variant gate (admin key)",
                ModelVersion,
                errors=(*ADMIN_ONLY, NotFound),
                authenticated=True,
            ),
        ),
    ]
