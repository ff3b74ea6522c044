"""Each tenant id's customer at the billing provider: set, changed, removed, audited,
kept after the tenant is deleted, refused when malformed; on SQLite and Postgres."""

from __future__ import annotations

import pytest

from headway.registry.errors import InvalidBillingCustomer, UnknownTenant
from headway.registry.model import Actor
from headway.registry.sql import SqlRegistry
from tests.registry.test_contract import newest, nothing_recorded, one_entry

ADMIN = Actor("admin:0123456789abcdef", "req-1")


def test_a_mapping_is_set_changed_and_removed_each_once_in_the_audit_log(
    registry: SqlRegistry,
) -> None:
    acme, _ = registry.add_tenant("acme", "interactive", actor=ADMIN)
    registry.add_tenant("beta", "batch", actor=ADMIN)
    assert registry.billing_customers() == {}

    entry = one_entry(
        registry, lambda: registry.set_billing_customer("acme", "cus_A1", actor=ADMIN)
    )
    assert (entry.action, entry.target, entry.before) == (
        "tenant.billing_customer",
        "tenant:acme",
        None,
    )
    assert entry.after == {"tenant_id": acme.id, "customer_id": "cus_A1"}
    assert registry.billing_customers() == {acme.id: "cus_A1"}

    nothing_recorded(registry, lambda: registry.set_billing_customer("acme", "cus_A1", actor=ADMIN))
    one_entry(registry, lambda: registry.set_billing_customer("acme", "cus_A2", actor=ADMIN))
    assert newest(registry).before == {"tenant_id": acme.id, "customer_id": "cus_A1"}
    assert registry.billing_customers() == {acme.id: "cus_A2"}

    assert registry.set_billing_customer("acme", None, actor=ADMIN) == (acme, None)
    assert newest(registry).after is None
    assert registry.billing_customers() == {}


def test_a_deleted_tenants_mapping_stays_for_its_last_exports(registry: SqlRegistry) -> None:
    acme, _ = registry.add_tenant("acme", "interactive", actor=ADMIN)
    registry.set_billing_customer("acme", "cus_old", actor=ADMIN)
    registry.delete_tenant("acme", actor=ADMIN)
    again, _ = registry.add_tenant("acme", "interactive", actor=ADMIN)
    assert registry.billing_customers() == {acme.id: "cus_old"}  # the new acme has none
    registry.set_billing_customer("acme", "cus_new", actor=ADMIN)
    assert registry.billing_customers() == {acme.id: "cus_old", again.id: "cus_new"}


@pytest.mark.parametrize("bad", ["", "x" * 256, "cus 1", "cüs_1", "cus_1\n"])
def test_a_malformed_customer_id_is_refused_and_nothing_recorded(
    registry: SqlRegistry, bad: str
) -> None:
    registry.add_tenant("acme", "interactive", actor=ADMIN)

    def refused() -> None:
        with pytest.raises(InvalidBillingCustomer):
            registry.set_billing_customer("acme", bad, actor=ADMIN)

    nothing_recorded(registry, refused)
    assert registry.billing_customers() == {}


def test_an_unknown_tenant_cannot_be_mapped(registry: SqlRegistry) -> None:
    with pytest.raises(UnknownTenant):
        registry.set_billing_customer("nobody", "cus_1", actor=ADMIN)
