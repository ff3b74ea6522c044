"""A tenant's burst, for the executor's check of each line at validation.

A line of more texts than its tenant's burst can never pass the tenant's quota (the
gateway answers such a request 429 without Retry-After), so validation refuses it at once
(``mover._within_burst``) rather than queue it. The burst is read from the registry the
gateways read, when the batch validates; a burst lowered later is met by the executor
itself (that 429 is the line's answer, in the error file).
"""

from __future__ import annotations

from headway.registry.errors import UnknownTenant
from headway.registry.store import TenantStore


class RegistryBursts:
    """``Bursts`` from the registry, by the tenant's id: a read per batch validated. A
    tenant that is gone has none (its batches go with it), and a later tenant of its name
    is another id, whose burst is never taken for it."""

    def __init__(self, registry: TenantStore) -> None:
        self._registry = registry

    def __call__(self, tenant_id: int) -> float | None:
        try:
            return self._registry.tenant_by_id(tenant_id).burst_texts
        except UnknownTenant:
            return None
