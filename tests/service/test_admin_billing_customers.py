"""``/admin/tenants/{name}/billing-customer``: set, shown, removed, refused; admin only."""

from __future__ import annotations

import pytest

from headway.registry.model import AuditQuery
from tests.service.test_admin_api import ADMIN, TENANT, create_tenant

PATH = "/admin/tenants/acme/billing-customer"


async def test_a_customer_is_set_shown_changed_and_removed(stack):
    await create_tenant(stack.client)
    shown = await stack.client.get(PATH, headers=ADMIN)
    assert shown.status_code == 200, shown.text
    assert shown.json()["customer_id"] is None
    tenant_id = shown.json()["tenant_id"]

    for customer in ("cus_A1", "cus_A2", None):
        put = await stack.client.put(PATH, headers=ADMIN, json={"customer_id": customer})
        assert put.status_code == 200, put.text
        assert put.json() == {"tenant": "acme", "tenant_id": tenant_id, "customer_id": customer}
        assert (await stack.client.get(PATH, headers=ADMIN)).json() == put.json()
    entries = stack.registry.audit(AuditQuery(action="tenant.billing_customer"))
    assert [e.after for e in reversed(entries)] == [
        {"tenant_id": tenant_id, "customer_id": "cus_A1"},
        {"tenant_id": tenant_id, "customer_id": "cus_A2"},
        None,
    ]


@pytest.mark.parametrize(
    "body", [{"customer_id": ""}, {"customer_id": "cus 1"}, {"customer_id": "x" * 256}, {}]
)
async def test_a_malformed_customer_is_a_422_and_changes_nothing(stack, body):
    await create_tenant(stack.client)
    answer = await stack.client.put(PATH, headers=ADMIN, json=body)
    assert answer.status_code == 422, answer.text
    assert stack.registry.billing_customers() == {}


async def test_an_unknown_tenant_is_a_404_and_a_tenant_key_is_refused(stack):
    missing = await stack.client.put(
        "/admin/tenants/nobody/billing-customer", headers=ADMIN, json={"customer_id": "cus_1"}
    )
    assert missing.status_code == 404
    await create_tenant(stack.client)
    refused = await stack.client.put(PATH, headers=TENANT, json={"customer_id": "cus_1"})
    assert refused.status_code in (401, 403)
    assert stack.registry.billing_customers() == {}
