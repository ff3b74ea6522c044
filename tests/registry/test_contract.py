"""The registry's contract (``RegistryStore``), the same on SQLite and on Postgres."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from headway.registry.errors import (
    InvalidLimit,
    InvalidOverlap,
    InvalidRollout,
    InvalidSplit,
    LastAdminKey,
    RegistryError,
    RolloutActive,
    UnknownKey,
    UnknownModel,
    UnknownRollout,
    UnknownTenant,
)
from headway.registry.keys import key_digest
from headway.registry.model import (
    Actor,
    AuditEntry,
    AuditQuery,
    BatchLimits,
    ModelRecord,
    Observation,
    RolloutPlan,
    Shadow,
    Split,
    TenantDeletion,
    key_id_of,
)
from headway.registry.sql import SqlRegistry
from headway.registry.store import RegistryStore
from tests.fakes import FakeClock
from tests.registry.conftest import Backend

V1 = ModelRecord("1" * 64, "mini", "embedding", 384, "none", size_bytes=90_000_000)
V2 = ModelRecord("2" * 64, "mini", "embedding", 384, "int8", size_bytes=23_000_000)
WIDER = ModelRecord("3" * 64, "wide", "embedding", 768, "none")
RERANKER = ModelRecord("4" * 64, "rank", "cross-encoder", 384, "none")
PLAN = RolloutPlan(steps=(0, 50, 100), interval_s=30.0, min_requests=5)
SHADOW_SPLIT = Split("mini", ((V1.version, 1.0),), shadow=Shadow(V2.version, 0.5))
ADMIN = Actor("admin:0123456789abcdef", "req-1")


def with_models(registry: SqlRegistry) -> SqlRegistry:
    registry.add_model(V1, ("mini",))
    for record in (V2, WIDER, RERANKER):
        registry.add_model(record)
    return registry


def newest(registry: SqlRegistry) -> AuditEntry:
    (entry,) = registry.audit(AuditQuery(limit=1))
    return entry


def one_entry(registry: SqlRegistry, write: Callable[[], Any]) -> AuditEntry:
    """Run ``write``; the one audit entry it appended (and it bumped the counter once)."""
    entries, changes = len(registry.audit(AuditQuery(limit=10_000))), registry.changes()
    write()
    assert len(registry.audit(AuditQuery(limit=10_000))) == entries + 1
    assert registry.changes() == changes + 1
    return newest(registry)


def nothing_recorded(registry: SqlRegistry, write: Callable[[], Any]) -> None:
    entries, changes = registry.audit(AuditQuery(limit=10_000)), registry.changes()
    write()
    assert (registry.audit(AuditQuery(limit=10_000)), registry.changes()) == (entries, changes)


def test_both_registries_are_registry_stores(registry: SqlRegistry) -> None:
    store: RegistryStore = registry  # mypy checks the protocol; this checks it runs
    assert store.changes() == 0
    assert store.snapshot().changes == 0


# -- the audit log ------------------------------------------------------------------


def test_every_write_appends_one_audit_entry_with_who_before_and_after(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    with_models(registry)
    actor = Actor("cli:ops", "req-42")
    written: list[AuditEntry] = []

    def audited(write: Callable[[], Any]) -> AuditEntry:
        clock.advance(1)
        entry = one_entry(registry, write)
        assert (entry.actor, entry.request_id, entry.at) == ("cli:ops", "req-42", clock.now)
        written.append(entry)
        return entry

    entry = audited(lambda: registry.add_tenant("acme", "batch", actor=actor, key="k-acme"))
    acme_key = key_id_of(key_digest("k-acme"))
    assert (entry.action, entry.target, entry.before) == ("tenant.create", "tenant:acme", None)
    assert entry.after == {
        "id": 1,
        "name": "acme",
        "tier": "batch",
        "rate_texts_per_s": 500.0,
        "burst_texts": 2000.0,
        "key_id": acme_key,
    }
    entry = audited(lambda: registry.update_tenant("acme", actor=actor, burst_texts=7))
    assert (entry.action, entry.before and entry.before["burst_texts"]) == ("tenant.update", 2000)
    assert entry.after is not None and entry.after["burst_texts"] == 7
    new_key: list[str] = []
    entry = audited(
        lambda: new_key.append(registry.rotate_key("acme", actor=actor, overlap_s=60)[1])
    )
    assert (entry.action, entry.target) == ("key.rotate", "tenant:acme")
    assert entry.before is not None and entry.after is not None
    assert [k["key_id"] for k in entry.before["keys"]] == [acme_key]
    assert entry.after["keys"][0]["expires_at"] == clock.now + 60
    assert entry.after["created"]["key_id"] == key_id_of(key_digest(new_key[0]))
    entry = audited(lambda: registry.revoke_key(acme_key, actor=actor))
    assert (entry.action, entry.target) == ("key.revoke", f"key:{acme_key}")
    assert entry.before is not None and entry.before["revoked_at"] is None
    assert entry.after is not None and entry.after["revoked_at"] == clock.now
    entry = audited(lambda: registry.add_admin_key(actor=actor, key="k-admin"))
    admin_key = key_id_of(key_digest("k-admin"))
    assert (entry.action, entry.target) == ("admin_key.create", f"key:{admin_key}")
    assert entry.after is not None and entry.after["role"] == "admin"
    entry = audited(lambda: registry.add_model(V2, ("mini-int8",), actor=actor))
    assert (entry.action, entry.target) == ("model.add", f"model:{V2.version}")
    assert entry.after is not None and entry.after["aliases"] == {"mini-int8": V2.version}
    split = Split("mini", ((V1.version, 3.0), (V2.version, 1.0)), pins=(("acme", V2.version),))
    entry = audited(lambda: registry.set_split(split, actor=actor))
    assert (entry.action, entry.target, entry.before) == ("split.set", "alias:mini", None)
    assert entry.after == {
        "alias": "mini",
        "weights": [[V1.version, 3.0], [V2.version, 1.0]],
        "sticky": "tenant",
        "pins": [["acme", V2.version]],
        "shadow": None,
    }
    entry = audited(lambda: registry.delete_split("mini", actor=actor))
    assert (entry.action, entry.after) == ("split.delete", None)
    assert entry.before is not None and entry.before["pins"] == [["acme", V2.version]]
    registry.set_split(split)
    entry = audited(lambda: registry.set_alias("mini", V2.version, actor=actor))
    assert (entry.action, entry.target) == ("alias.set", "alias:mini")
    assert entry.before is not None and entry.before["version"] == V1.version
    assert entry.before["split"] is not None  # the split it removed
    assert entry.after == {"version": V2.version, "split": None}
    assert registry.splits() == []
    started: list[int] = []
    split_v1 = Split("mini", ((V2.version, 1.0),), shadow=Shadow(V1.version, 1.0))
    entry = audited(
        lambda: started.append(
            registry.start_rollout("mini", V1.version, PLAN, actor=actor, split=split_v1).id
        )
    )
    assert (entry.action, entry.target) == ("rollout.start", f"rollout:{started[0]}")
    assert entry.after is not None and entry.after["rollout"]["plan"]["steps"] == [0, 50, 100]
    entry = audited(
        lambda: registry.transition(
            started[0],
            expect=("running", 0),
            state="paused",
            step=0,
            step_started_at=None,
            reason="paused by ops",
            split=split_v1,
            action="rollout.pause",
            actor=actor,
        )
    )
    assert (entry.action, entry.target) == ("rollout.pause", f"rollout:{started[0]}")
    assert entry.before is not None and entry.after is not None
    assert (entry.before["state"], entry.after["state"]) == ("running", "paused")
    assert entry.after["reason"] == "paused by ops"
    entry = audited(lambda: registry.delete_tenant("acme", actor=actor))
    assert (entry.action, entry.target, entry.after) == ("tenant.delete", "tenant:acme", None)
    assert entry.before is not None and entry.before["id"] == 1
    entry = audited(lambda: registry.finish_deletion(1, actor=actor))
    assert (entry.action, entry.target) == ("tenant.purge", "tenant:acme")
    assert entry.after is not None and entry.after["finished_at"] == clock.now
    stored = json.dumps([(e.before, e.after) for e in registry.audit(AuditQuery(limit=1000))])
    for key in ("k-acme", "k-admin", new_key[0]):
        assert key not in stored
        assert key_digest(key).hex() not in stored  # key ids only, never a digest
    assert [e.id for e in registry.audit(AuditQuery(actor="cli:ops"))] == [
        e.id for e in reversed(written)
    ]


def test_a_write_that_changes_nothing_records_nothing(registry: SqlRegistry) -> None:
    with_models(registry)
    registry.add_tenant("acme", "interactive", rate_texts_per_s=5)
    nothing_recorded(registry, lambda: registry.update_tenant("acme"))
    nothing_recorded(registry, lambda: registry.update_tenant("acme", rate_texts_per_s=5))
    nothing_recorded(registry, lambda: registry.add_model(V1, ("mini",)))
    nothing_recorded(registry, lambda: registry.set_alias("mini", V1.version))
    nothing_recorded(registry, lambda: registry.delete_split("mini"))
    (key,) = registry.keys("acme")
    registry.add_admin_key()
    registry.revoke_key(key.key_id)
    nothing_recorded(registry, lambda: registry.revoke_key(key.key_id))


def test_a_refused_write_records_nothing(registry: SqlRegistry) -> None:
    with_models(registry)
    entries, changes = registry.audit(AuditQuery()), registry.changes()
    with pytest.raises(UnknownTenant):
        registry.delete_tenant("nobody")
    with pytest.raises(UnknownModel):
        registry.set_split(Split("mini", ((V1.version, 1.0), ("0" * 64, 1.0))))
    with pytest.raises(LastAdminKey):
        registry.revoke_key(registry.add_admin_key()[0].key_id)
    assert registry.audit(AuditQuery()) == [newest(registry), *entries]  # the key's, only
    assert registry.changes() == changes + 1


def test_the_audit_log_filters_by_actor_action_target_time_and_pages(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    with_models(registry)
    registry.add_tenant("acme", "batch", actor=Actor("cli:ann"))
    clock.advance(10)
    split = SHADOW_SPLIT
    rollout = registry.start_rollout("mini", V2.version, PLAN, actor=ADMIN, split=split)
    clock.advance(10)
    registry.transition(
        rollout.id,
        expect=("running", 0),
        state="running",
        step=1,
        step_started_at=clock.now,
        reason="shadow agreed",
        split=Split("mini", ((V1.version, 1.0), (V2.version, 1.0))),
        action="rollout.advance",
        actor=Actor("rollout:gw-1"),
    )
    clock.advance(10)
    registry.update_tenant("acme", actor=Actor("cli:ann"), tier="interactive")

    def actions(**query: Any) -> list[str]:
        return [entry.action for entry in registry.audit(AuditQuery(**query))]

    assert actions(limit=4) == [
        "tenant.update",
        "rollout.advance",
        "rollout.start",
        "tenant.create",
    ]
    assert actions(actor="cli:ann") == ["tenant.update", "tenant.create"]
    assert actions(action="rollout.") == ["rollout.advance", "rollout.start"]
    assert actions(action="rollout.start") == ["rollout.start"]
    assert actions(action="rollout") == []  # without its dot, an exact name
    assert actions(target="tenant:acme") == ["tenant.update", "tenant.create"]
    start = clock.now - 20
    assert actions(since=start, until=start + 10) == ["rollout.start"]
    assert actions(since=start) == ["tenant.update", "rollout.advance", "rollout.start"]
    page = registry.audit(AuditQuery(limit=2))
    assert [e.action for e in page] == ["tenant.update", "rollout.advance"]
    rest = registry.audit(AuditQuery(limit=2, before_id=page[-1].id))
    assert [e.action for e in rest] == ["rollout.start", "tenant.create"]
    assert actions(limit=2, before_id=page[-1].id, actor="cli:ann") == ["tenant.create"]
    assert actions(limit=0) == []


def test_the_audit_log_is_append_only_in_the_database_too(
    registry: SqlRegistry, backend: Backend
) -> None:
    registry.add_tenant("acme", "batch")
    for statement in ("UPDATE audit_log SET actor = 'nobody'", "DELETE FROM audit_log"):
        with pytest.raises(Exception, match="append-only"):
            backend.sql(statement)
    assert newest(registry).actor == "system"


def test_the_change_counter_is_in_the_snapshot(registry: SqlRegistry) -> None:
    registry.add_tenant("acme", "batch")
    registry.add_model(V1, ("mini",))
    assert registry.changes() == 2 == registry.snapshot().changes


def test_observations_upsert_without_audit_or_change(registry: SqlRegistry) -> None:
    with_models(registry)
    rollout = registry.start_rollout("mini", V2.version, PLAN, split=SHADOW_SPLIT)

    def observed(gateway: str, requests: int) -> Observation:
        return Observation(rollout.id, 0, gateway, "shadow", requests, 1, (1, 2, 3), 4, 3.9, 2, 1)

    nothing_recorded(registry, lambda: registry.record_observation(observed("gw-1", 10)))
    registry.record_observation(observed("gw-2", 5))
    registry.record_observation(observed("gw-1", 30))  # cumulative within the step: replaces
    assert registry.observations(rollout.id, 0) == [observed("gw-1", 30), observed("gw-2", 5)]
    assert registry.observations(rollout.id, 1) == []


# -- keys ----------------------------------------------------------------------------


def test_a_rotated_out_key_works_until_the_overlap_ends(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    _, old = registry.add_tenant("acme", "batch")
    clock.advance(1)
    created, new = registry.rotate_key("acme", overlap_s=60)
    snapshot = registry.snapshot()
    assert snapshot.principals[key_digest(old)].expires_at == clock.now + 60
    assert snapshot.principals[key_digest(new)].expires_at is None
    assert registry.keys("acme")[0].key_id == created.key_id  # newest first
    clock.advance(59)
    assert key_digest(old) in registry.snapshot().principals
    clock.advance(1)
    assert set(registry.snapshot().principals) == {key_digest(new)}
    old_record = registry.keys("acme")[1]
    assert (old_record.expires_at, old_record.revoked_at) == (clock.now, None)


def test_a_second_rotation_never_extends_an_expiring_key(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    _, first = registry.add_tenant("acme", "batch")
    registry.rotate_key("acme", overlap_s=10)
    registry.rotate_key("acme", overlap_s=3600)
    assert registry.snapshot().principals[key_digest(first)].expires_at == clock.now + 10


def test_a_rotation_without_overlap_revokes_the_old_keys_at_once(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    registry.add_tenant("acme", "batch")
    clock.advance(1)
    registry.rotate_key("acme", overlap_s=0, key="k-new")
    assert set(registry.snapshot().principals) == {key_digest("k-new")}
    assert registry.keys("acme")[1].revoked_at == clock.now
    with pytest.raises(InvalidOverlap):
        registry.rotate_key("acme", overlap_s=-1)
    with pytest.raises(UnknownTenant):
        registry.rotate_key("nobody", overlap_s=0)


def test_a_revoked_key_leaves_the_snapshot_and_the_last_admin_key_stays(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    _, key = registry.add_tenant("acme", "batch")
    first, first_key = registry.add_admin_key()
    clock.advance(1)
    second, _ = registry.add_admin_key()
    registry.revoke_key(key_id_of(key_digest(key)))
    assert key_digest(key) not in registry.snapshot().principals
    registry.revoke_key(first.key_id)
    with pytest.raises(LastAdminKey, match=second.key_id):
        registry.revoke_key(second.key_id)
    assert [k.revoked_at is None for k in registry.keys(None)] == [True, False]
    assert key_digest(first_key) not in registry.snapshot().principals
    with pytest.raises(UnknownKey):
        registry.revoke_key("00" * 8)


def test_a_deleted_tenant_loses_its_keys_and_its_pins(registry: SqlRegistry) -> None:
    with_models(registry)
    _, acme_key = registry.add_tenant("acme", "batch")
    registry.rotate_key("acme", overlap_s=600)
    _, globex_key = registry.add_tenant("globex", "batch")
    split = Split("mini", ((V1.version, 1.0),), pins=(("acme", V2.version), ("globex", V2.version)))
    registry.set_split(split)
    key_ids = sorted(k.key_id for k in registry.keys("acme"))
    deleted = registry.delete_tenant("acme")
    assert deleted.name == "acme"
    assert [t.name for t in registry.tenants()] == ["globex"]
    assert set(registry.snapshot().principals) == {key_digest(globex_key)}
    assert registry.splits() == [Split("mini", split.weights, pins=(("globex", V2.version),))]
    before = newest(registry).before
    assert before is not None
    assert (before["key_ids"], before["pins"]) == (key_ids, {"mini": V2.version})
    with pytest.raises(UnknownTenant):
        registry.keys("acme")
    registry.finish_deletion(deleted.id)  # what it left outside the registry is gone
    again, _ = registry.add_tenant("acme", "interactive", key=acme_key)  # name and key free
    assert again.id != deleted.id


def test_a_tenant_id_is_never_given_again_not_even_the_newest_deleted_ones(
    registry: SqlRegistry,
) -> None:
    first, _ = registry.add_tenant("acme", "batch")
    newest_one, _ = registry.add_tenant("globex", "batch")
    registry.delete_tenant("globex")  # SQLite would give its rowid, the largest, again
    registry.finish_deletion(newest_one.id)
    later, _ = registry.add_tenant("initech", "batch")
    again, _ = registry.add_tenant("globex", "batch")
    assert (first.id, newest_one.id) == (1, 2)
    assert (later.id, again.id) == (3, 4)
    assert registry.snapshot().tenants["globex"].id == 4
    assert registry.tenant("globex") == again
    assert registry.tenant_by_id(4) == again == registry.snapshot().tenant_ids[4]
    with pytest.raises(UnknownTenant, match="no tenant has the id 2"):
        registry.tenant_by_id(newest_one.id)  # the deleted globex's id: nobody's now
    assert 2 not in registry.snapshot().tenant_ids


def test_a_deleted_tenants_name_is_free_at_once_and_its_deletion_is_finished_by_id(
    registry: SqlRegistry, clock: FakeClock
) -> None:
    """What the tenant left outside the registry is its id's, so the name need not wait."""
    acme, _ = registry.add_tenant("acme", "batch")
    registry.delete_tenant("acme")
    (pending,) = registry.tenant_deletions()
    assert pending == TenantDeletion(acme.id, "acme", clock.now, None, None)
    again, _ = registry.add_tenant("acme", "batch")
    assert again.id != acme.id and registry.tenant_deletions() == [pending]
    registry.delete_tenant("acme")  # a second deletion of the name, of the second tenant
    assert [d.tenant_id for d in registry.tenant_deletions()] == [acme.id, again.id]
    registry.finish_deletion(again.id)
    nothing_recorded(registry, lambda: registry.list_deletion_blobs(acme.id, ("b1", "b2")))
    listed = registry.list_deletion_blobs(acme.id, ("other",))  # the first list stays
    assert listed.blobs == ("b1", "b2") == registry.tenant_deletions()[0].blobs
    clock.advance(5)
    finished = registry.finish_deletion(acme.id)
    assert finished.finished_at == clock.now
    assert registry.tenant_deletions() == []
    assert [d.tenant_id for d in registry.tenant_deletions(pending=False)] == [acme.id, again.id]
    assert registry.tenant_deletions(pending=False)[0] == finished
    nothing_recorded(registry, lambda: registry.finish_deletion(acme.id))
    with pytest.raises(UnknownTenant):
        registry.finish_deletion(999)


def test_a_tenant_deletion_is_one_transaction(registry: SqlRegistry, backend: Backend) -> None:
    with_models(registry)
    acme, acme_key = registry.add_tenant("acme", "batch")
    registry.set_split(Split("mini", ((V1.version, 1.0),), pins=(("acme", V2.version),)))
    # The deletion record's insert fails (its id is there already): nothing else may go.
    backend.sql(
        f"INSERT INTO tenant_deletions (tenant_id, name, deleted_at) VALUES ({acme.id}, 'x', 0)"
    )
    changes = registry.changes()
    with pytest.raises(RegistryError):
        registry.delete_tenant("acme")
    assert registry.tenant("acme") == acme
    assert key_digest(acme_key) in registry.snapshot().principals
    assert registry.splits()[0].pins == (("acme", V2.version),)
    assert registry.changes() == changes


# -- models, aliases, splits ---------------------------------------------------------


def test_the_snapshot_maps_aliases_versions_and_splits(registry: SqlRegistry) -> None:
    with_models(registry)
    split = Split("mini", ((V1.version, 9.0), (V2.version, 1.0)), sticky="user")
    registry.set_split(split)
    snapshot = registry.snapshot()
    assert snapshot.models["mini"] == snapshot.models[V1.version] == registry.model(V1.version)
    assert snapshot.models[V1.version].size_bytes == V1.size_bytes
    assert snapshot.splits == {"mini": split}
    assert snapshot.versions_of("mini") == {V1.version, V2.version}
    assert registry.resolve_model("mini") == registry.resolve_model(V1.version)
    with pytest.raises(UnknownModel):
        registry.model("0" * 64)


def test_a_models_token_limit_and_narrower_widths_are_kept(registry: SqlRegistry) -> None:
    declared = ModelRecord(
        "5" * 64, "nomic", "embedding", 768, "none", max_tokens=8192,
        matryoshka_dimensions=(512, 256),
    )  # fmt: skip
    registry.add_model(declared, ("nomic",))
    stored = registry.snapshot().models["nomic"]
    assert (stored.max_tokens, stored.matryoshka_dimensions) == (8192, (512, 256))
    registry.add_model(V1)
    assert (
        registry.model(V1.version).max_tokens,
        registry.model(V1.version).matryoshka_dimensions,
    ) == (0, ())


def test_pointing_an_alias_elsewhere_removes_its_split(registry: SqlRegistry) -> None:
    with_models(registry)
    registry.set_split(Split("mini", ((V1.version, 1.0), (V2.version, 1.0))))
    registry.set_alias("mini", V2.version)
    assert (registry.splits(), registry.resolve_model("mini")) == ([], registry.model(V2.version))
    with pytest.raises(UnknownModel):
        registry.set_alias("mini", "0" * 64)


@pytest.mark.parametrize(
    ("split", "error", "message"),
    [
        (Split("mini", ()), InvalidSplit, "weights no version"),
        (Split("mini", ((V1.version, 0.0),)), InvalidSplit, "positive, finite"),
        (Split("mini", ((V1.version, float("nan")),)), InvalidSplit, "positive, finite"),
        (Split("mini", ((V1.version, 1.0), (V1.version, 2.0))), InvalidSplit, "twice"),
        (
            Split("mini", ((V1.version, 1.0),), shadow=Shadow(V2.version, 1.5)),
            InvalidSplit,
            r"in \(0, 1\]",
        ),
        (
            Split("mini", ((V1.version, 1.0),), shadow=Shadow(V1.version, 0.5)),
            InvalidSplit,
            "also weighted",
        ),
        (Split("mini", ((V1.version, 1.0),), sticky="ip"), InvalidSplit, "sticky"),  # type: ignore[arg-type]
        (Split("mini", (("0" * 64, 1.0),)), UnknownModel, "no model version"),
        (Split("nothing", ((V1.version, 1.0),)), UnknownModel, "no alias named 'nothing'"),
        (
            Split("mini", ((V1.version, 1.0),), pins=(("nobody", V1.version),)),
            UnknownTenant,
            "nobody",
        ),
    ],
)
def test_a_split_that_breaks_a_rule_is_refused(
    registry: SqlRegistry, split: Split, error: type[Exception], message: str
) -> None:
    with_models(registry)
    with pytest.raises(error, match=message):
        registry.set_split(split)
    assert registry.splits() == []


# -- rollouts ------------------------------------------------------------------------


def test_a_rollout_starts_with_its_split_and_owns_the_alias(registry: SqlRegistry) -> None:
    with_models(registry)
    rollout = registry.start_rollout("mini", V2.version, PLAN, actor=ADMIN, split=SHADOW_SPLIT)
    assert (rollout.state, rollout.step, rollout.primary, rollout.candidate) == (
        "running",
        0,
        V1.version,
        V2.version,
    )
    assert (rollout.plan, rollout.started_by, rollout.step_started_at) == (PLAN, ADMIN.who, None)
    assert registry.snapshot().splits == {"mini": SHADOW_SPLIT}
    assert registry.rollout(rollout.id) == rollout
    assert registry.rollouts("mini", active=True) == [rollout] == registry.rollouts()
    with pytest.raises(RolloutActive):
        registry.start_rollout("mini", V2.version, PLAN, split=SHADOW_SPLIT)
    with pytest.raises(RolloutActive):
        registry.set_split(Split("mini", ((V1.version, 1.0),)))
    with pytest.raises(RolloutActive):
        registry.delete_split("mini")
    with pytest.raises(RolloutActive):
        registry.set_alias("mini", V2.version)
    with pytest.raises(RolloutActive):
        registry.add_model(V2, ("mini",))
    with pytest.raises(UnknownRollout):
        registry.rollout(rollout.id + 1)


@pytest.mark.parametrize(
    ("candidate", "plan", "split", "error", "message"),
    [
        (V1.version, PLAN, Split("mini", ((V1.version, 1.0),)), InvalidRollout, "already the"),
        (WIDER.version, PLAN, Split("mini", ((V1.version, 1.0), (WIDER.version, 1.0))),
         InvalidRollout, "768 dimensions"),
        (RERANKER.version, PLAN, Split("mini", ((V1.version, 1.0), (RERANKER.version, 1.0))),
         InvalidRollout, "cross-encoder"),
        ("0" * 64, PLAN, Split("mini", ((V1.version, 1.0), ("0" * 64, 1.0))), UnknownModel, "0000"),
        (V2.version, RolloutPlan(steps=(0, 50)), SHADOW_SPLIT, InvalidRollout, "end at 100"),
        (V2.version, PLAN, Split("mini", ((V1.version, 1.0),)), InvalidRollout, "candidate"),
        (V2.version, PLAN, Split("other", ((V2.version, 1.0),)), InvalidSplit, "other"),
    ],
)  # fmt: skip
def test_a_rollout_that_breaks_a_rule_does_not_start(
    registry: SqlRegistry,
    candidate: str,
    plan: RolloutPlan,
    split: Split,
    error: type[Exception],
    message: str,
) -> None:
    with_models(registry)
    with pytest.raises(error, match=message):
        registry.start_rollout("mini", candidate, plan, split=split)
    assert (registry.rollouts(), registry.splits()) == ([], [])


def test_a_transition_is_compare_and_set(registry: SqlRegistry, clock: FakeClock) -> None:
    with_models(registry)
    rollout = registry.start_rollout("mini", V2.version, PLAN, split=SHADOW_SPLIT)
    half = Split("mini", ((V1.version, 1.0), (V2.version, 1.0)))

    def advance(expect: tuple[Any, int], split: Split) -> Any:
        return registry.transition(
            rollout.id,
            expect=expect,
            state="running",
            step=1,
            step_started_at=clock.now,
            reason="shadow agreed",
            split=split,
            action="rollout.advance",
            actor=Actor("rollout:gw-1"),
        )

    moved = advance(("running", 0), half)
    assert moved is not None and (moved.state, moved.step, moved.reason) == (
        "running",
        1,
        "shadow agreed",
    )
    assert moved.step_started_at == clock.now
    assert registry.splits() == [half]
    nothing_recorded(registry, lambda: advance(("running", 0), SHADOW_SPLIT))  # another gateway
    assert advance(("running", 0), SHADOW_SPLIT) is None
    assert registry.splits() == [half]
    done = registry.transition(
        rollout.id,
        expect=("running", 1),
        state="succeeded",
        step=2,
        step_started_at=clock.now,
        reason="promoted",
        split=None,
        alias_version=V2.version,
        action="rollout.promote",
    )
    assert done is not None and done.state == "succeeded"
    assert (registry.splits(), registry.resolve_model("mini")) == ([], registry.model(V2.version))
    assert registry.rollouts(active=True) == []
    with pytest.raises(InvalidRollout, match="ended"):
        registry.transition(
            rollout.id,
            expect=("succeeded", 2),
            state="running",
            step=2,
            step_started_at=None,
            reason="again",
            split=None,
            action="rollout.resume",
        )
    registry.set_alias("mini", V1.version)  # the alias is free once the rollout ended


def test_a_transition_to_a_step_the_plan_lacks_is_refused(registry: SqlRegistry) -> None:
    with_models(registry)
    rollout = registry.start_rollout("mini", V2.version, PLAN, split=SHADOW_SPLIT)
    with pytest.raises(InvalidRollout, match="no step 3"):
        registry.transition(
            rollout.id,
            expect=("running", 0),
            state="running",
            step=3,
            step_started_at=None,
            reason="",
            split=SHADOW_SPLIT,
            action="rollout.advance",
        )
    assert registry.rollout(rollout.id) == rollout
    with pytest.raises(UnknownRollout):
        registry.transition(
            rollout.id + 1,
            expect=("running", 0),
            state="running",
            step=1,
            step_started_at=None,
            reason="",
            split=None,
            action="rollout.advance",
        )


def test_a_second_registry_on_the_database_sees_every_write(backend: Backend) -> None:
    first, second = backend.open_another(), backend.open_another()
    first.add_tenant("acme", "batch")
    assert [t.name for t in second.tenants()] == ["acme"]
    assert second.changes() == 1


def test_demo_rows_are_seeded_only_into_a_registry_that_never_held_a_tenant_or_key(
    registry: SqlRegistry,
) -> None:
    assert registry.seed_demo() is True
    for tenant in registry.tenants():
        registry.delete_tenant(tenant.name)
    (admin,) = registry.keys(None)
    registry.add_admin_key()
    registry.revoke_key(admin.key_id)
    assert registry.seed_demo() is False  # every demo row removed: they stay removed
    assert registry.tenants() == []


def test_a_tenants_batch_bounds_are_its_own_until_set_back_to_the_setting(
    backend: Backend, registry: SqlRegistry
) -> None:
    tenant, key = registry.add_tenant(
        "acme", "batch", batch_limits={"max_files": 5, "max_open_batches": 0}
    )
    assert tenant.batch_limits == BatchLimits(max_files=5, max_open_batches=0)
    assert registry.tenant("acme") == tenant
    principal = registry.snapshot().principals[key_digest(key)]
    assert principal.tenant is not None and principal.tenant.batch_limits == tenant.batch_limits
    create = newest(registry)
    assert create.after is not None and create.after["max_files"] == 5
    assert "max_stored_bytes" not in create.after  # not its own: the setting

    entry = one_entry(
        registry,
        lambda: registry.update_tenant(
            "acme", batch_limits={"max_files": None, "max_stored_bytes": 2**40}
        ),
    )
    assert entry.before is not None and entry.after is not None
    assert (entry.before.get("max_files"), entry.after.get("max_files")) == (5, None)
    assert entry.after["max_stored_bytes"] == 2**40
    after = BatchLimits(max_stored_bytes=2**40, max_open_batches=0)
    assert registry.tenant("acme").batch_limits == after
    # Another process sees the rule; an update naming other fields keeps it.
    assert backend.open_another().tenant("acme").batch_limits == after
    registry.update_tenant("acme", burst_texts=9)
    assert registry.tenant("acme").batch_limits == after
    nothing_recorded(registry, lambda: registry.update_tenant("acme", batch_limits={}))
    nothing_recorded(
        registry, lambda: registry.update_tenant("acme", batch_limits={"max_open_batches": 0})
    )


@pytest.mark.parametrize(
    "limits",
    [
        {"max_files": -1},
        {"max_files": 2**63},
        {"max_files": True},
        {"max_files": 1.5},
        {"max_lines": 5},
    ],
)
def test_a_batch_bound_that_no_tenant_may_have_is_refused(
    registry: SqlRegistry, limits: dict[str, Any]
) -> None:
    with pytest.raises(InvalidLimit):
        registry.add_tenant("acme", "batch", batch_limits=limits)
    assert registry.tenants() == []
    registry.add_tenant("acme", "batch")
    nothing_recorded(registry, lambda: _refused(registry, limits))


def _refused(registry: SqlRegistry, limits: dict[str, Any]) -> None:
    with pytest.raises(InvalidLimit):
        registry.update_tenant("acme", batch_limits=limits)


def test_a_variants_agreement_and_its_sources_gate_are_kept_and_audited(
    registry: SqlRegistry,
) -> None:
    from headway.models.agreement import Agreement
    from headway.registry.errors import InvalidGate
    from headway.registry.model import VariantGate

    with_models(registry)
    measured = Agreement(V1.version, 40, 0.9912, 0.95, 0.925)
    variant = ModelRecord("5" * 64, "mini-int8", "embedding", 384, "int8", agreement=measured)
    registry.add_model(variant, ("mini-int8",))
    assert registry.model(variant.version).agreement == measured
    gate = VariantGate(min_mean_cosine=0.99, min_nn_agreement=0.9)
    changes = registry.changes()
    assert registry.set_variant_gate(V1.version, gate, actor=ADMIN).variant_gate == gate
    assert registry.model(V1.version).variant_gate == gate
    assert registry.changes() > changes  # gateways reload and see it
    entry = newest(registry)
    assert (entry.action, entry.target) == ("model.gate", f"model:{V1.version}")
    assert entry.after == {"variant_gate": {"min_mean_cosine": 0.99, "min_nn_agreement": 0.9}}
    registry.set_variant_gate(V1.version, None, actor=ADMIN)
    assert registry.model(V1.version).variant_gate is None
    with pytest.raises(InvalidGate):
        registry.set_variant_gate(V1.version, VariantGate(1.5, 0.9), actor=ADMIN)
    with pytest.raises(UnknownModel):
        registry.set_variant_gate("9" * 64, gate, actor=ADMIN)
