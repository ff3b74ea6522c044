"""Who reads whose entries: each tenant alone, or a named group of tenants that trust each other.

A scope is part of every key's namespace (``key.py``), the unit the memory tier bounds
(``memory.py``) and the prefix of an entry's Redis key (``redis_tier.py``). A tenant's
scope is ``tenant:NAME``; a tenant listed in ``gateway.cache.shared_groups`` has its
group's, ``group:NAME``. The two prefixes differ, so no tenant name, whatever it is, can
name a group's scope or another tenant's.

A group is a deliberate leak: a member's request is answered faster for a text another
member sent, so members can learn what each other embedded. There is no scope every
tenant shares (the former ``global``): a tenant sees another's entries only where an
operator put both in one group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TENANT_PREFIX = "tenant:"
GROUP_PREFIX = "group:"


def tenant_scope(tenant: str) -> str:
    return TENANT_PREFIX + tenant


def group_scope(group: str) -> str:
    return GROUP_PREFIX + group


class Scopes:
    """Each tenant's scope, from the groups that share one (a tenant in at most one)."""

    def __init__(self, groups: Mapping[str, Sequence[str]]) -> None:
        self._grouped: dict[str, str] = {}
        for group, tenants in groups.items():
            for tenant in tenants:
                if tenant in self._grouped:
                    raise ValueError(f"tenant {tenant!r} is in more than one shared group")
                self._grouped[tenant] = group_scope(group)

    def of(self, tenant: str) -> str:
        return self._grouped.get(tenant) or tenant_scope(tenant)

    def holding(self, tenant: str) -> tuple[str, ...]:
        """Every scope that may hold what ``tenant`` sent: its own (filled before it joined
        a group, if it did) and its group's."""
        own = tenant_scope(tenant)
        group = self._grouped.get(tenant)
        return (own,) if group is None else (own, group)
