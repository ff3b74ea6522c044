"""Whose the batch-store rows from before tenant ids are (``control/batches/legacy.py``)."""

from __future__ import annotations

from headway.control.batches.legacy import owner_of
from headway.registry.model import Tenant, TenantDeletion


def deletion(tenant_id: int, name: str, at: float, finished: float | None = None) -> TenantDeletion:
    return TenantDeletion(tenant_id, name, at, None, finished)


NOW_ACME = Tenant(9, "acme", "interactive", 10, 10)


def test_the_tenant_of_the_name_when_no_deletion_of_it_is_unfinished() -> None:
    pending = [deletion(3, "globex", 10.0), deletion(4, "acme", 5.0, finished=6.0)]
    assert owner_of("acme", pending, NOW_ACME) == 9


def test_an_unfinished_deletion_of_the_name_before_the_tenant_that_has_it_now() -> None:
    """Before ids a name was not given again until its deletion finished: rows of a name
    with one unfinished were that deleted tenant's, whoever has the name now."""
    assert owner_of("acme", [deletion(3, "acme", 10.0)], NOW_ACME) == 3
    assert owner_of("acme", [deletion(3, "acme", 10.0)], None) == 3


def test_of_several_unfinished_deletions_of_a_name_the_oldest() -> None:
    pending = [deletion(7, "acme", 20.0), deletion(3, "acme", 10.0), deletion(5, "acme", 10.0)]
    assert owner_of("acme", pending, NOW_ACME) == 3


def test_nobody_when_no_tenant_has_the_name_and_none_is_being_deleted() -> None:
    assert owner_of("ghost", [deletion(3, "acme", 10.0)], None) is None
