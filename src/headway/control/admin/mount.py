"""The admin API as one mount: every resource's routes, over the gateway's registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from headway.control.admin import (
    aliases,
    audit,
    billing_customers,
    models,
    replicas,
    rollouts,
    splits,
    tenants,
)
from headway.control.admin.access import AdminParts
from headway.control.mount import Mount
from headway.gateway.service import GatewayService
from headway.registry.model import TenantDeletion


def admin_mount(
    service: GatewayService, finish_deletion: Callable[[TenantDeletion], Awaitable[bool]]
) -> Mount:
    """``finish_deletion``: deletes what a deleted tenant left outside the registry."""
    parts = AdminParts(service.snapshots, service.registry, finish_deletion)
    return Mount(
        [
            *replicas.routes(service.pools),
            *tenants.routes(parts),
            *billing_customers.routes(parts),
            *models.routes(parts, service.pools),
            *aliases.routes(parts),
            *splits.routes(parts),
            *rollouts.routes(parts),
            *audit.routes(parts),
        ]
    )
