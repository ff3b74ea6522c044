"""Who reads whose entries: each tenant alone, or a named group of tenants that trust each other.

A scope is part of every key's namespace (``key.py``), the unit the memory tier bounds
(``memory.py``) and the prefix of an entry's Redis key (``redis_tier.py``). A tenant's
scope is ``tenant:ID``, its immutable id (``registry.model.Tenant.id``, never given
twice), so a tenant created with a deleted one's name meets none of its entries, in this
gateway, in Redis, or in another gateway's memory that still holds them. A tenant listed
in ``gateway.cache.shared_groups`` has its group's, ``group:NAME``. Groups are configured
by tenant name, so a tenant joins its group by name: one created with a deleted member's
name is a member too, as the operator's list says (deleting a member drops the group's
entries, ``RequestCache.forget_tenant``). The two prefixes differ, so no tenant can name a
group's scope, and no group another tenant's.

A group is a deliberate leak: a member's request is answered faster for a text another
member sent, so members can learn what each other embedded. There is no scope every
tenant shares (the former ``global``): a tenant sees another's entries only where an
operator put both in one group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TENANT_PREFIX = "tenant:"
GROUP_PREFIX = "group:"


def tenant_scope(tenant_id: int) -> str:
    return f"{TENANT_PREFIX}{tenant_id}"


def group_scope(group: str) -> str:
    return GROUP_PREFIX + group


class Scopes:
    """Each tenant's scope, from the groups that share one (a tenant in at most one, by
    name); otherwise its own, by id."""

    def __init__(self, groups: Mapping[str, Sequence[str]]) -> None:
        self._grouped: dict[str, str] = {}
        for group, tenants in groups.items():
            for tenant in tenants:
                if tenant in self._grouped:
                    raise ValueError(f"tenant {tenant!r} is in more than one shared group")
                self._grouped[tenant] = group_scope(group)

    def of(self, name: str, tenant_id: int) -> str:
        return self._grouped.get(name) or tenant_scope(tenant_id)

    def holding(self, name: str, tenant_id: int) -> tuple[str, ...]:
        """Every scope that may hold what the tenant sent: its own (filled before it joined
        a group, if it did) and its group's."""
        own = tenant_scope(tenant_id)
        group = self._grouped.get(name)
        return (own,) if group is None else (own, group)
