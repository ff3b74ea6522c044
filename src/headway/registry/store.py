"""The registry's interface, one protocol per resource, implemented together on SQLite
(embedded) and Postgres (shared) as ``RegistryStore``; a caller that needs one resource
takes that protocol.

Reads return plain values (``model``). Every write keeps the rules of ``rules`` and
``errors`` and appends exactly one ``AuditEntry`` (who, what before and after, when,
the request id) in the same transaction as the change; each write also bumps the
change counter (``changes``), which gateways and workers poll to pick a change up
within ``registry_poll_s``. Writes hold the registry's write lock from their first
read (SQLite ``BEGIN IMMEDIATE``, Postgres ``pg_advisory_xact_lock``), so what a
write checks cannot change before it writes. Observations are the one exception:
counts, not admin writes, upserted without an audit entry or a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from headway.registry.model import (
    Actor,
    ApiKey,
    AuditEntry,
    AuditQuery,
    ModelRecord,
    Observation,
    Rollout,
    RolloutPlan,
    RolloutState,
    Snapshot,
    Split,
    Tenant,
    TenantDeletion,
    VariantGate,
)


class SnapshotReads(Protocol):
    """What gateways and workers poll: the whole snapshot, and whether it moved."""

    def snapshot(self) -> Snapshot: ...

    def model_snapshot(self) -> Snapshot:
        """``snapshot`` without tenants or keys (a worker's read)."""
        ...

    def changes(self) -> int:
        """The change counter: bumped by every write (not by observations)."""
        ...


class TenantStore(Protocol):
    """Tenants, their keys, their deletion and their billing customer."""

    def tenants(self) -> list[Tenant]: ...

    def tenant(self, name: str) -> Tenant:
        """``UnknownTenant`` if there is none of that name."""
        ...

    def tenant_by_id(self, tenant_id: int) -> Tenant:
        """``UnknownTenant`` if no tenant has that id now (never had it, or was deleted)."""
        ...

    def tenant_deletions(self, *, pending: bool = True) -> list[TenantDeletion]:
        """Deleted tenants, oldest deletion first; ``pending``: only those whose data
        outside the registry is not yet deleted."""
        ...

    def keys(self, tenant: str | None) -> list[ApiKey]:
        """A tenant's keys (``UnknownTenant``), or with None the admin keys; newest first,
        revoked ones included."""
        ...

    def billing_customers(self) -> dict[int, str]:
        """Tenant id → its customer id at the billing provider, deleted tenants' too."""
        ...

    # writes (each one audit entry) ----------------------------------------------

    def add_tenant(
        self,
        name: str,
        tier: str,
        *,
        actor: Actor,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
        key: str | None = None,
        batch_limits: Mapping[str, int | None] | None = None,
    ) -> tuple[Tenant, str]:
        """The tenant and its first key (returned once, stored only as a digest);
        ``batch_limits``: its own Batch API bounds by name (``BATCH_LIMITS``)."""
        ...

    def update_tenant(
        self,
        name: str,
        *,
        actor: Actor,
        tier: str | None = None,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
        batch_limits: Mapping[str, int | None] | None = None,
    ) -> Tenant:
        """``batch_limits``: the bounds named change; None sets one back to the setting."""
        ...

    def delete_tenant(self, name: str, *, actor: Actor) -> Tenant:
        """Removes the tenant and revokes every key of it at once; its pins go from every
        split; and records the deletion (``TenantDeletion``), all in one transaction. The
        usage ledger is another store and keeps its rows (billing), keyed by the tenant's
        id, which no later tenant gets. The name is free at once: what the tenant left
        outside the registry (batches, files, cache entries) is keyed by its id there,
        out of a later tenant's reach, and deleted by whoever finishes the deletion."""
        ...

    def list_deletion_blobs(self, tenant_id: int, blobs: tuple[str, ...]) -> TenantDeletion:
        """Record the stored contents a deleted tenant's files named, unless a list is
        recorded already (that one stays); the deletion as it is now (``UnknownTenant``).
        Neither audited nor a change: bookkeeping of the deletion's progress."""
        ...

    def finish_deletion(self, tenant_id: int, *, actor: Actor) -> TenantDeletion:
        """Mark the deletion finished (audited ``tenant.purge``; again: nothing changes);
        ``UnknownTenant`` for an id never deleted."""
        ...

    def set_billing_customer(
        self, name: str, customer_id: str | None, *, actor: Actor
    ) -> tuple[Tenant, str | None]:
        """Map the tenant to its customer at the billing provider (None: remove the
        mapping; its exports are then refused); audited ``tenant.billing_customer``. The
        tenant and the customer id now (``UnknownTenant``, ``InvalidBillingCustomer``)."""
        ...

    def rotate_key(
        self, tenant: str, *, actor: Actor, overlap_s: float, key: str | None = None
    ) -> tuple[ApiKey, str]:
        """A new key for the tenant; its other live keys expire ``overlap_s`` from now
        (0: at once). Returns the new key's record and the key (shown once)."""
        ...

    def revoke_key(self, key_id: str, *, actor: Actor) -> ApiKey:
        """Revoked now (``UnknownKey``); revoking the last live admin key is refused."""
        ...

    def add_admin_key(self, *, actor: Actor, key: str | None = None) -> tuple[ApiKey, str]: ...

    def seed_demo(self) -> bool:
        """On a registry that never held a tenant or a key, the documented demo tenants and
        admin key (``registry/demo.py``); whether it created them."""
        ...


class ModelCatalog(Protocol):
    """Model versions (immutable, by content hash) and the aliases naming them."""

    def models(self) -> list[tuple[ModelRecord, list[str]]]:
        """Every version with the aliases whose primary it is."""
        ...

    def model(self, version: str) -> ModelRecord:
        """``UnknownModel`` if no version has that hash."""
        ...

    def resolve_model(self, name: str) -> ModelRecord | None:
        """An alias's primary version, or a version by its hash."""
        ...

    def add_model(
        self, record: ModelRecord, aliases: tuple[str, ...] = (), *, actor: Actor
    ) -> ModelRecord:
        """Record a version (once: a version is a content hash, and adding it again keeps
        the first record) and point ``aliases`` at it. Audited when something changed."""
        ...

    def set_alias(self, alias: str, version: str, *, actor: Actor) -> None:
        """Point ``alias`` at one version; any split on it is removed (``UnknownModel``;
        ``RolloutActive`` while a rollout owns the alias)."""
        ...

    def delete_alias(self, alias: str, *, actor: Actor) -> str:
        """Remove ``alias`` and its split; the version it named (``UnknownModel``;
        ``RolloutActive`` while a rollout owns it, ``AliasInUse`` once one has)."""
        ...

    def set_variant_gate(
        self, version: str, gate: VariantGate | None, *, actor: Actor
    ) -> ModelRecord:
        """The gate a variant derived from ``version`` must pass to be promoted (None:
        none); audited (``UnknownModel``)."""
        ...


class SplitStore(Protocol):
    """An alias's traffic split across versions."""

    def splits(self) -> list[Split]: ...

    def set_split(self, split: Split, *, actor: Actor) -> Split:
        """Replace the alias's split (``InvalidSplit``, ``UnknownModel``, ``UnknownTenant``
        for a pin, ``RolloutActive``). The alias must exist."""
        ...

    def delete_split(self, alias: str, *, actor: Actor) -> None: ...


class RolloutStore(Protocol):
    """Rollouts, their moves, and the counts each gateway records for a step."""

    def rollouts(self, alias: str | None = None, *, active: bool = False) -> list[Rollout]:
        """Newest first; ``active``: only those in ``ACTIVE_STATES``."""
        ...

    def rollout(self, rollout_id: int) -> Rollout:
        """``UnknownRollout`` if there is none with that id."""
        ...

    def observations(self, rollout_id: int, step: int) -> list[Observation]: ...

    def start_rollout(
        self, alias: str, candidate: str, plan: RolloutPlan, *, actor: Actor, split: Split
    ) -> Rollout:
        """A running rollout at step 0 with ``split`` as the alias's split, in one
        transaction (``RolloutActive`` if the alias has one, ``InvalidRollout``)."""
        ...

    def transition(
        self,
        rollout_id: int,
        *,
        expect: tuple[RolloutState, int],
        state: RolloutState,
        step: int,
        step_started_at: float | None,
        reason: str,
        split: Split | None,
        alias_version: str | None = None,
        action: str,
        actor: Actor,
    ) -> Rollout | None:
        """Move a rollout from ``expect`` (state, step) to its next state, with the
        alias's new split (None: no split) and, on promotion, its new primary, in one
        transaction. None when the rollout is no longer in ``expect`` (another gateway
        moved it first): compare-and-set, so every step happens once."""
        ...

    def record_observation(self, observation: Observation) -> None:
        """Upsert this gateway's counts for (rollout, step, gateway, role)."""
        ...


class AuditLog(Protocol):
    """Every admin write, as it was made."""

    def audit(self, query: AuditQuery) -> list[AuditEntry]:
        """Newest first, at most ``query.limit``."""
        ...


class RegistryStore(
    SnapshotReads, TenantStore, ModelCatalog, SplitStore, RolloutStore, AuditLog, Protocol
):
    """The whole registry."""

    def close(self) -> None:
        """Release the connection kept between calls, if any (usable again after)."""
        ...
