"""The registry's one implementation of ``RegistryStore``, on any ``Dialect``.

Every write checks its values first (``rules``), then runs in one write transaction
that holds the write lock from its first read, checks what the database holds (does
the name exist? does a rollout own the alias?), writes, and appends its audit entry
and bumps the change counter (``_record``) before it commits: a write and its audit
entry commit together or not at all. A write that would change nothing records
nothing (adding a version again, an update naming no change, revoking a revoked key).
Nothing here updates or deletes an audit entry, and the schema refuses it too.

``sqlite.Registry`` and ``postgres.PostgresRegistry`` differ only in the dialect they
pass.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace

from headway.registry import queries as q
from headway.registry.codec import (
    DELETION_COLUMNS,
    KEY_COLUMNS,
    LIVE_KEY,
    MODEL_COLUMNS,
    MODEL_PLACEHOLDERS,
    OBSERVATION_COLUMNS,
    JsonDict,
    api_key_of,
    deletion_of,
    key_json,
    model_json,
    model_row,
    plan_json,
    rollout_json,
    split_json,
    tenant_json,
)
from headway.registry.demo import DEMO_ADMIN_KEY, DEMO_TENANTS
from headway.registry.errors import (
    AliasInUse,
    DuplicateTenant,
    InvalidRollout,
    InvalidSplit,
    LastAdminKey,
    UnknownKey,
    UnknownModel,
    UnknownTenant,
)
from headway.registry.keys import new_key
from headway.registry.migrations import migrate
from headway.registry.model import (
    ACTIVE_STATES,
    SYSTEM,
    Actor,
    ApiKey,
    BatchLimits,
    ModelRecord,
    Observation,
    Rollout,
    RolloutPlan,
    RolloutState,
    Split,
    Tenant,
    TenantDeletion,
    Tier,
    VariantGate,
)
from headway.registry.reads import RegistryReads
from headway.registry.rules import (
    DEFAULT_BURST,
    DEFAULT_RATE,
    billing_customer_value,
    check_batch_limits,
    check_gate,
    check_plan,
    check_split,
    model_kind,
    overlap_value,
    quota_value,
    tenant_name,
    tier_of,
)
from headway.storage.dialect import Dialect, Tx

"""The actor of a write whose caller names none (start-up seeding, imports)."""

NO_BATCH_LIMITS = BatchLimits()


class SqlRegistry(RegistryReads):
    def __init__(self, dialect: Dialect, clock: Callable[[], float] = time.time) -> None:
        """Apply the missing migrations (``SchemaTooNew`` on a newer database)."""
        super().__init__(dialect, clock)
        try:
            with dialect.write() as tx:
                migrate(tx, dialect.name, clock)
        except BaseException:
            dialect.close()  # nobody else will: the registry was never returned
            raise

    # tenants and keys ------------------------------------------------------------

    def add_tenant(
        self,
        name: str,
        tier: str,
        *,
        actor: Actor = SYSTEM,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
        key: str | None = None,
        batch_limits: Mapping[str, int | None] | None = None,
    ) -> tuple[Tenant, str]:
        """Create a tenant and its first key; the key is returned once, never stored.

        The quota defaults to the tier's (``DEFAULT_RATE``, ``DEFAULT_BURST``); a Batch API
        bound left out (``BATCH_LIMITS``) is the gateway's setting.
        """
        tenant_name(name)
        checked = tier_of(tier)
        limits = check_batch_limits(batch_limits or {})
        rate = quota_value(
            "rate_texts_per_s",
            DEFAULT_RATE[checked] if rate_texts_per_s is None else rate_texts_per_s,
        )
        burst = quota_value(
            "burst_texts", DEFAULT_BURST[checked] if burst_texts is None else burst_texts
        )
        key = key or new_key()
        with self._dialect.write() as tx:
            tenant = self._add_tenant(tx, name, checked, rate, burst, key, actor, limits)
        return tenant, key

    def update_tenant(
        self,
        name: str,
        *,
        actor: Actor = SYSTEM,
        tier: str | None = None,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
        batch_limits: Mapping[str, int | None] | None = None,
    ) -> Tenant:
        """Change a tenant's tier, quota or Batch API bounds (``batch_limits``: the bounds
        named change, None sets one back to the gateway's setting); gateways pick it up on
        their next poll."""
        new_tier = None if tier is None else tier_of(tier)
        rate = (
            None if rate_texts_per_s is None else quota_value("rate_texts_per_s", rate_texts_per_s)
        )
        burst = None if burst_texts is None else quota_value("burst_texts", burst_texts)
        changes = batch_limits or {}
        check_batch_limits(changes)
        with self._dialect.write() as tx:
            before = q.existing_tenant(tx, name)
            after = Tenant(
                before.id,
                name,
                before.tier if new_tier is None else new_tier,
                before.rate_texts_per_s if rate is None else rate,
                before.burst_texts if burst is None else burst,
                check_batch_limits(changes, before.batch_limits),
            )
            if after == before:
                return before
            limits = after.batch_limits
            tx.execute(
                "UPDATE tenants SET tier = ?, rate_texts_per_s = ?, burst_texts = ?,"
                " max_files = ?, max_stored_bytes = ?, max_open_batches = ? WHERE id = ?",
                (
                    after.tier,
                    after.rate_texts_per_s,
                    after.burst_texts,
                    limits.max_files,
                    limits.max_stored_bytes,
                    limits.max_open_batches,
                    after.id,
                ),
            )
            self._record(
                tx,
                actor,
                "tenant.update",
                f"tenant:{name}",
                tenant_json(before),
                tenant_json(after),
            )
        return after

    def delete_tenant(self, name: str, *, actor: Actor = SYSTEM) -> Tenant:
        with self._dialect.write() as tx:
            tenant = q.existing_tenant(tx, name)
            key_ids = [
                key_id
                for (key_id,) in tx.all(
                    "SELECT key_id FROM api_keys WHERE tenant_id = ?", (tenant.id,)
                )
            ]
            pins: dict[str, str] = {}
            for split in q.splits(tx):
                kept = tuple((pinned, version) for pinned, version in split.pins if pinned != name)
                if kept != split.pins:
                    pins[split.alias] = dict(split.pins)[name]
                    q.put_split(tx, replace(split, pins=kept), self._clock())
            tx.execute("DELETE FROM api_keys WHERE tenant_id = ?", (tenant.id,))
            tx.execute("DELETE FROM tenants WHERE id = ?", (tenant.id,))
            tx.execute(
                "INSERT INTO tenant_deletions (tenant_id, name, deleted_at) VALUES (?, ?, ?)",
                (tenant.id, name, self._clock()),
            )
            before = {**tenant_json(tenant), "key_ids": sorted(key_ids), "pins": pins}
            self._record(tx, actor, "tenant.delete", f"tenant:{name}", before, None)
        return tenant

    def set_billing_customer(
        self, name: str, customer_id: str | None, *, actor: Actor = SYSTEM
    ) -> tuple[Tenant, str | None]:
        """Upsert (or, with None, delete) the tenant id's row in ``billing_customers``;
        no change, no audit entry."""
        wanted = None if customer_id is None else billing_customer_value(customer_id)
        with self._dialect.write() as tx:
            tenant = q.existing_tenant(tx, name)
            row = tx.one(
                "SELECT customer_id FROM billing_customers WHERE tenant_id = ?", (tenant.id,)
            )
            before = None if row is None else str(row[0])
            if before == wanted:
                return tenant, before
            if wanted is None:
                tx.execute("DELETE FROM billing_customers WHERE tenant_id = ?", (tenant.id,))
            else:
                tx.execute(
                    "INSERT INTO billing_customers (tenant_id, customer_id, updated_at)"
                    " VALUES (?, ?, ?) ON CONFLICT (tenant_id) DO UPDATE SET"
                    " customer_id = excluded.customer_id, updated_at = excluded.updated_at",
                    (tenant.id, wanted, self._clock()),
                )
            self._record(
                tx,
                actor,
                "tenant.billing_customer",
                f"tenant:{name}",
                None if before is None else {"tenant_id": tenant.id, "customer_id": before},
                None if wanted is None else {"tenant_id": tenant.id, "customer_id": wanted},
            )
        return tenant, wanted

    def list_deletion_blobs(self, tenant_id: int, blobs: tuple[str, ...]) -> TenantDeletion:
        """Bookkeeping, as observations are (no audit entry, no change): the first list
        recorded stays, so two finishers delete the same contents."""
        with self._dialect.write(lock=False) as tx:
            tx.execute(
                "UPDATE tenant_deletions SET blobs = ? WHERE tenant_id = ? AND blobs IS NULL",
                (tx.json(list(blobs)), tenant_id),
            )
            return _existing_deletion(tx, tenant_id)

    def finish_deletion(self, tenant_id: int, *, actor: Actor = SYSTEM) -> TenantDeletion:
        with self._dialect.write() as tx:
            before = _existing_deletion(tx, tenant_id)
            if before.finished_at is not None:
                return before
            after = replace(before, finished_at=self._clock())
            tx.execute(
                "UPDATE tenant_deletions SET finished_at = ? WHERE tenant_id = ?",
                (after.finished_at, tenant_id),
            )
            self._record(
                tx,
                actor,
                "tenant.purge",
                f"tenant:{before.name}",
                {"id": tenant_id, "deleted_at": before.deleted_at, "finished_at": None},
                {
                    "id": tenant_id,
                    "deleted_at": before.deleted_at,
                    "finished_at": after.finished_at,
                },
            )
        return after

    def rotate_key(
        self, tenant: str, *, actor: Actor = SYSTEM, overlap_s: float, key: str | None = None
    ) -> tuple[ApiKey, str]:
        overlap = overlap_value(overlap_s)
        key = key or new_key()
        with self._dialect.write() as tx:
            owner = q.existing_tenant(tx, tenant)
            now = self._clock()
            live = [
                api_key_of(row)
                for row in tx.all(
                    f"SELECT {KEY_COLUMNS} WHERE k.tenant_id = ? AND {LIVE_KEY} ORDER BY k.key_id",
                    (owner.id, now),
                )
            ]
            rotated_out = []
            for old in live:
                if overlap == 0:
                    expiring = replace(old, revoked_at=now)
                else:
                    until = now + overlap
                    expiring = replace(old, expires_at=min(until, old.expires_at or until))
                tx.execute(
                    "UPDATE api_keys SET expires_at = ?, revoked_at = ? WHERE key_id = ?",
                    (expiring.expires_at, expiring.revoked_at, old.key_id),
                )
                rotated_out.append(expiring)
            created = q.insert_key(tx, key, owner, "tenant", now)
            self._record(
                tx,
                actor,
                "key.rotate",
                f"tenant:{tenant}",
                {"keys": [key_json(old) for old in live]},
                {"created": key_json(created), "keys": [key_json(k) for k in rotated_out]},
            )
        return created, key

    def revoke_key(self, key_id: str, *, actor: Actor = SYSTEM) -> ApiKey:
        with self._dialect.write() as tx:
            row = tx.one(f"SELECT {KEY_COLUMNS} WHERE k.key_id = ?", (key_id,))
            if row is None:
                raise UnknownKey(f"no API key has the id {key_id!r}")
            before = api_key_of(row)
            if before.revoked_at is not None:
                return before
            now = self._clock()
            if before.role == "admin" and q.is_live(before, now):
                others = tx.one(
                    f"SELECT count(*) FROM api_keys k WHERE k.role = 'admin' AND k.key_id <> ?"
                    f" AND {LIVE_KEY}",
                    (key_id, now),
                )
                if others is None or others[0] == 0:
                    raise LastAdminKey(f"key {key_id} is the last live admin key")
            tx.execute("UPDATE api_keys SET revoked_at = ? WHERE key_id = ?", (now, key_id))
            after = replace(before, revoked_at=now)
            self._record(
                tx, actor, "key.revoke", f"key:{key_id}", key_json(before), key_json(after)
            )
        return after

    def add_admin_key(self, *, actor: Actor = SYSTEM, key: str | None = None) -> tuple[ApiKey, str]:
        key = key or new_key()
        with self._dialect.write() as tx:
            return self._add_admin_key(tx, key, actor), key

    def seed_demo(self) -> bool:
        """On a registry that never held a tenant or a key, create the documented demo
        tenants and keys (in one transaction: two processes starting at once seed once).
        Once an operator has made or removed a tenant or key, never again: demo rows an
        operator deleted stay deleted."""
        with self._dialect.write() as tx:
            if q.ever_held_principals(tx):
                return False
            for name, tier, key in DEMO_TENANTS:
                self._add_tenant(
                    tx, name, tier, DEFAULT_RATE[tier], DEFAULT_BURST[tier], key, SYSTEM
                )
            self._add_admin_key(tx, DEMO_ADMIN_KEY, SYSTEM)
        return True

    # models, aliases, splits ---------------------------------------------------------

    def add_model(
        self, record: ModelRecord, aliases: tuple[str, ...] = (), *, actor: Actor = SYSTEM
    ) -> ModelRecord:
        """Record a version (once: versions are content hashes) and point ``aliases`` at
        it; an alias that moves loses its split, as with ``set_alias``. The record's
        ``created_at`` is when the registry first saw the version, unless it names one."""
        model_kind(record.kind)
        with self._dialect.write() as tx:
            now = self._clock()
            existing = q.model(tx, record.version)
            stored = existing or replace(record, created_at=record.created_at or now)
            if existing is None:
                tx.execute(
                    f"INSERT INTO models ({MODEL_COLUMNS}) VALUES ({MODEL_PLACEHOLDERS})",
                    model_row(stored),
                )
            moved: dict[str, str | None] = {}
            removed: dict[str, JsonDict | None] = {}
            for alias in aliases:
                current = q.alias_version(tx, alias)
                if current == record.version:
                    continue
                q.refuse_if_active(tx, alias)
                moved[alias] = current
                removed[alias] = split_json(q.point_alias(tx, alias, record.version, now))
            if existing is None or moved:
                self._record(
                    tx,
                    actor,
                    "model.add",
                    f"model:{record.version}",
                    {
                        "model": None if existing is None else model_json(existing),
                        "aliases": moved,
                        "splits": {alias: s for alias, s in removed.items() if s is not None},
                    },
                    {"model": model_json(stored), "aliases": dict.fromkeys(moved, record.version)},
                )
        return stored

    def set_alias(self, alias: str, version: str, *, actor: Actor = SYSTEM) -> None:
        with self._dialect.write() as tx:
            q.existing_model(tx, version)
            q.refuse_if_active(tx, alias)
            current = q.alias_version(tx, alias)
            if current == version and q.split(tx, alias) is None:
                return
            removed = q.point_alias(tx, alias, version, self._clock())
            self._record(
                tx,
                actor,
                "alias.set",
                f"alias:{alias}",
                {"version": current, "split": split_json(removed)},
                {"version": version, "split": None},
            )

    def delete_alias(self, alias: str, *, actor: Actor = SYSTEM) -> str:
        with self._dialect.write() as tx:
            q.refuse_if_active(tx, alias)
            current = q.alias_version(tx, alias)
            if current is None:
                raise UnknownModel(f"no alias named {alias!r}")
            if tx.one("SELECT id FROM rollouts WHERE alias = ? LIMIT 1", (alias,)) is not None:
                raise AliasInUse(
                    f"alias {alias!r} has rollouts in its history, which name it: point it"
                    " at another version instead"
                )
            removed = q.split(tx, alias)
            tx.execute("DELETE FROM splits WHERE alias = ?", (alias,))
            tx.execute("DELETE FROM aliases WHERE alias = ?", (alias,))
            self._record(
                tx,
                actor,
                "alias.delete",
                f"alias:{alias}",
                {"version": current, "split": split_json(removed)},
                None,
            )
        return current

    def set_variant_gate(
        self, version: str, gate: VariantGate | None, *, actor: Actor = SYSTEM
    ) -> ModelRecord:
        check_gate(gate)
        with self._dialect.write() as tx:
            before = q.existing_model(tx, version)
            if before.variant_gate == gate:
                return before
            encoded = None if gate is None else json.dumps(asdict(gate))
            tx.execute("UPDATE models SET variant_gate = ? WHERE version = ?", (encoded, version))
            self._record(
                tx,
                actor,
                "model.gate",
                f"model:{version}",
                {"variant_gate": _gate_json(before.variant_gate)},
                {"variant_gate": _gate_json(gate)},
            )
        return replace(before, variant_gate=gate)

    def set_split(self, split: Split, *, actor: Actor = SYSTEM) -> Split:
        check_split(split)
        with self._dialect.write() as tx:
            q.check_split_names(tx, split)
            q.refuse_if_active(tx, split.alias)
            before = q.split(tx, split.alias)
            if before == split:
                return split
            q.put_split(tx, split, self._clock())
            self._record(
                tx,
                actor,
                "split.set",
                f"alias:{split.alias}",
                split_json(before),
                split_json(split),
            )
        return split

    def delete_split(self, alias: str, *, actor: Actor = SYSTEM) -> None:
        with self._dialect.write() as tx:
            q.refuse_if_active(tx, alias)
            before = q.split(tx, alias)
            if before is None:
                return
            tx.execute("DELETE FROM splits WHERE alias = ?", (alias,))
            self._record(tx, actor, "split.delete", f"alias:{alias}", split_json(before), None)

    # rollouts ------------------------------------------------------------------------

    def start_rollout(
        self,
        alias: str,
        candidate: str,
        plan: RolloutPlan,
        *,
        actor: Actor = SYSTEM,
        split: Split,
    ) -> Rollout:
        check_plan(plan)
        check_split(split)
        if split.alias != alias:
            raise InvalidSplit(f"a split of {split.alias!r} cannot start a rollout of {alias!r}")
        if candidate not in split.versions():
            raise InvalidRollout(f"the split does not send the candidate {candidate} any traffic")
        with self._dialect.write() as tx:
            primary_version = q.alias_version(tx, alias)
            if primary_version is None:
                raise UnknownModel(f"no alias named {alias!r}")
            primary = q.existing_model(tx, primary_version)
            challenger = q.existing_model(tx, candidate)
            if candidate == primary_version:
                raise InvalidRollout(f"{candidate} is already the primary of {alias!r}")
            if (challenger.kind, challenger.dimensions) != (primary.kind, primary.dimensions):
                raise InvalidRollout(
                    f"the candidate is a {challenger.kind} of {challenger.dimensions} dimensions,"
                    f" the primary a {primary.kind} of {primary.dimensions}"
                )
            q.refuse_if_active(tx, alias)
            q.check_split_names(tx, split)
            now = self._clock()
            row = tx.one(
                "INSERT INTO rollouts (alias, primary_version, candidate_version, plan, state,"
                " step, step_started_at, reason, started_by, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'running', 0, NULL, 'started', ?, ?, ?) RETURNING id",
                (alias, primary_version, candidate, tx.json(plan_json(plan)), actor.who, now, now),
            )
            assert row is not None
            rollout = q.existing_rollout(tx, int(row[0]))
            before = q.split(tx, alias)
            q.put_split(tx, split, now)
            self._record(
                tx,
                actor,
                "rollout.start",
                f"rollout:{rollout.id}",
                {"split": split_json(before)},
                {"rollout": rollout_json(rollout), "split": split_json(split)},
            )
        return rollout

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
        actor: Actor = SYSTEM,
    ) -> Rollout | None:
        if split is not None:
            check_split(split)
        with self._dialect.write() as tx:
            before = q.existing_rollout(tx, rollout_id)
            if (before.state, before.step) != expect:
                return None
            if before.state not in ACTIVE_STATES:
                raise InvalidRollout(f"rollout {rollout_id} has ended ({before.state})")
            if not 0 <= step < len(before.plan.steps):
                raise InvalidRollout(f"rollout {rollout_id}'s plan has no step {step}")
            if split is not None:
                if split.alias != before.alias:
                    raise InvalidSplit(f"rollout {rollout_id} owns the split of {before.alias!r}")
                q.check_split_names(tx, split)
            if alias_version is not None:
                q.existing_model(tx, alias_version)
            now = self._clock()
            version_before = q.alias_version(tx, before.alias)
            split_before = q.split(tx, before.alias)
            tx.execute(
                "UPDATE rollouts SET state = ?, step = ?, step_started_at = ?, reason = ?,"
                " updated_at = ? WHERE id = ?",
                (state, step, step_started_at, reason, now, rollout_id),
            )
            if alias_version is not None:
                q.point_alias(tx, before.alias, alias_version, now)
            if split is None:
                tx.execute("DELETE FROM splits WHERE alias = ?", (before.alias,))
            else:
                q.put_split(tx, split, now)
            after = q.existing_rollout(tx, rollout_id)
            self._record(
                tx,
                actor,
                action,
                f"rollout:{rollout_id}",
                _move_json(before, version_before, split_before),
                _move_json(after, alias_version or version_before, split),
            )
        return after

    def record_observation(self, observation: Observation) -> None:
        o = observation
        with self._dialect.write(lock=False) as tx:
            tx.execute(
                f"INSERT INTO observations ({OBSERVATION_COLUMNS}, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (rollout_id, step, gateway_id, role) DO UPDATE SET"
                " requests = excluded.requests, errors = excluded.errors,"
                " latency_buckets = excluded.latency_buckets,"
                " agreement_n = excluded.agreement_n, agreement_sum = excluded.agreement_sum,"
                " top1_n = excluded.top1_n, top1_agree = excluded.top1_agree,"
                " updated_at = excluded.updated_at",
                (
                    o.rollout_id,
                    o.step,
                    o.gateway_id,
                    o.role,
                    o.requests,
                    o.errors,
                    tx.json(list(o.latency_buckets)),
                    o.agreement_n,
                    o.agreement_sum,
                    o.top1_n,
                    o.top1_agree,
                    self._clock(),
                ),
            )

    # inside a write --------------------------------------------------------------------

    def _record(
        self,
        tx: Tx,
        actor: Actor,
        action: str,
        target: str,
        before: JsonDict | None,
        after: JsonDict | None,
    ) -> None:
        """The write's audit entry, and the change counter's bump, in its transaction."""
        tx.execute(
            "INSERT INTO audit_log (at, actor, action, target, before, after, request_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                self._clock(),
                actor.who,
                action,
                target,
                tx.json(before),
                tx.json(after),
                actor.request_id,
            ),
        )
        tx.execute("UPDATE registry_state SET changes = changes + 1 WHERE id = 1")

    def _add_tenant(
        self,
        tx: Tx,
        name: str,
        tier: Tier,
        rate: float,
        burst: float,
        key: str,
        actor: Actor,
        limits: BatchLimits = NO_BATCH_LIMITS,
    ) -> Tenant:
        if q.tenant(tx, name) is not None:
            raise DuplicateTenant(f"tenant {name!r} already exists")
        now = self._clock()
        tenant = Tenant(q.next_tenant_id(tx), name, tier, rate, burst, limits)
        tx.execute(
            "INSERT INTO tenants (id, name, tier, rate_texts_per_s, burst_texts, max_files,"
            " max_stored_bytes, max_open_batches, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tenant.id,
                name,
                tier,
                rate,
                burst,
                limits.max_files,
                limits.max_stored_bytes,
                limits.max_open_batches,
                now,
            ),
        )
        created = q.insert_key(tx, key, tenant, "tenant", now)
        self._record(
            tx,
            actor,
            "tenant.create",
            f"tenant:{name}",
            None,
            {**tenant_json(tenant), "key_id": created.key_id},
        )
        return tenant

    def _add_admin_key(self, tx: Tx, key: str, actor: Actor) -> ApiKey:
        created = q.insert_key(tx, key, None, "admin", self._clock())
        self._record(
            tx, actor, "admin_key.create", f"key:{created.key_id}", None, key_json(created)
        )
        return created


def _existing_deletion(tx: Tx, tenant_id: int) -> TenantDeletion:
    row = tx.one(
        f"SELECT {DELETION_COLUMNS} FROM tenant_deletions WHERE tenant_id = ?", (tenant_id,)
    )
    if row is None:
        raise UnknownTenant(f"no deleted tenant had the id {tenant_id}")
    return deletion_of(row, tx.parsed)


def _move_json(rollout: Rollout, version: str | None, split: Split | None) -> JsonDict:
    return {
        "state": rollout.state,
        "step": rollout.step,
        "step_started_at": rollout.step_started_at,
        "reason": rollout.reason,
        "version": version,
        "split": split_json(split),
    }


def _gate_json(gate: VariantGate | None) -> dict[str, float] | None:
    return None if gate is None else asdict(gate)
