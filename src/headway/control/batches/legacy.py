"""Batch-store rows from before tenant ids, given to their tenants by name.

The batch store's migration 3 keyed files and batches by the tenant's id; the rows it
found, and any a process of the previous version writes while an upgrade rolls, carry
``LEGACY_TENANT_ID`` (0) and their tenant's name, and are nobody's: no tenant reads them,
the mover and the executor leave their batches alone. The batch store cannot see the
registry, so this does the adoption, in the gateway, which has both:

- a name with an unfinished deletion: the oldest such deletion's tenant. Until tenant ids
  a name was not given again before its deletion had finished, so the rows of a name with
  an unfinished deletion were that tenant's; they are then deleted with it, by id;
- else the tenant that has the name now;
- else nobody's still (a name no tenant has: the rows wait, unread).

Every gateway adopts at start and in its ``tenant_deletions`` loop, and ``TenantData``
adopts a name's rows before it finishes a deletion of that name, so a deletion never
leaves legacy rows behind for a later tenant of the name to adopt. Adopting is repeatable:
a row adopted once is its tenant's and is never looked at again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from headway.batches.store import BatchStore
from headway.registry.errors import UnknownTenant
from headway.registry.model import Tenant, TenantDeletion
from headway.registry.store import TenantStore

log = logging.getLogger(__name__)


def owner_of(name: str, pending: Sequence[TenantDeletion], current: Tenant | None) -> int | None:
    """Whose the legacy rows of ``name`` are (the module's rule); ``pending``: the
    unfinished deletions, any names."""
    deleted = [d for d in pending if d.name == name and d.finished_at is None]
    if deleted:
        return min(deleted, key=lambda d: (d.deleted_at, d.tenant_id)).tenant_id
    return None if current is None else current.id


def adopt(
    registry: TenantStore, store: BatchStore, names: Iterable[str] | None = None
) -> dict[str, int]:
    """Give the legacy rows of ``names`` (None: every name that has some) to their owners;
    the rows each name's owner got. Blocking: run it in a thread."""
    legacy = store.legacy_tenants() if names is None else sorted(set(names))
    if not legacy:
        return {}
    pending = registry.tenant_deletions()
    adopted: dict[str, int] = {}
    for name in legacy:
        owner = owner_of(name, pending, _current(registry, name))
        if owner is None:
            continue
        count = store.adopt(name, owner)
        if count:
            adopted[name] = count
            log.info(
                "batch store: %d rows of %s from before tenant ids are now id %d's",
                count,
                name,
                owner,
            )
    return adopted


def _current(registry: TenantStore, name: str) -> Tenant | None:
    try:
        return registry.tenant(name)
    except UnknownTenant:
        return None
