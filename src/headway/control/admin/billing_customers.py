"""``/admin/tenants/{name}/billing-customer``: the tenant's customer id at the billing
provider, which the usage export reports its hours to (the registry's mapping from
tenant id to customer, ``RegistryStore.set_billing_customer``).

``PUT`` with ``{"customer_id": "cus_…"}`` sets or changes it, with ``null`` removes it
(the export then refuses the tenant's hours until one is set); ``GET`` shows it. A
deleted tenant's mapping stays for its last exports; a new tenant of its name has an
id, and a mapping, of its own.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from headway.control.admin.access import ADMIN_ONLY, WITH_BODY, AdminParts, admin_actor, read, write
from headway.control.admin.body import decode_body
from headway.errors import NotFound
from headway.gateway.auth.kinds import ADMIN_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.router import Route
from headway.registry.rules import MAX_CUSTOMER_ID_CHARS
from headway.registry.store import RegistryStore

CustomerId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_CUSTOMER_ID_CHARS, pattern=r"^[!-~]+$")
]


class CustomerChange(msgspec.Struct, forbid_unknown_fields=True):
    customer_id: CustomerId | None
    """Printable ASCII without spaces; null removes the mapping."""


class CustomerAnswer(msgspec.Struct):
    tenant: str
    tenant_id: int
    customer_id: str | None


_change = msgspec.json.Decoder(CustomerChange)


def get_customer(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        name = request.path_params["name"]

        def look_up(store: RegistryStore) -> CustomerAnswer:
            tenant = store.tenant(name)
            return CustomerAnswer(name, tenant.id, store.billing_customers().get(tenant.id))

        return json_response(await read(parts, request, look_up))

    return handle


def set_customer(parts: AdminParts) -> Handler:
    async def handle(request: Request) -> Response:
        actor = admin_actor(request)
        name = request.path_params["name"]
        body = decode_body(request, _change)
        tenant, customer = await write(
            parts, lambda store: store.set_billing_customer(name, body.customer_id, actor=actor)
        )
        return json_response(CustomerAnswer(name, tenant.id, customer))

    return handle


def routes(parts: AdminParts) -> list[DocumentedRoute]:
    path = "/admin/tenants/{name}/billing-customer"
    return [
        DocumentedRoute(
            Route("GET", path, "admin_billing_customer_get", get_customer(parts), auth=ADMIN_KEY),
            Operation(
                "The tenant's customer id at the billing provider (admin key)",
                CustomerAnswer,
                errors=(*ADMIN_ONLY, NotFound),
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("PUT", path, "admin_billing_customer_set", set_customer(parts), auth=ADMIN_KEY),
            Operation(
                "Set (or with null remove) the tenant's billing customer; the usage export "
                "refuses a tenant without one (admin key)",
                CustomerAnswer,
                CustomerChange,
                (*WITH_BODY, NotFound),
                authenticated=True,
            ),
        ),
    ]
