"""The statements the registry's operations share, each run on an open transaction.

Lookups (``tenant``, ``model``, ``split``...) return None for what is not there; the
``existing_*`` ones raise the registry error that names it. Writes here are parts of
a registry write and record nothing themselves: the write that calls them appends the
audit entry.
"""

from __future__ import annotations

from headway.registry.codec import (
    DELETION_COLUMNS,
    MODEL_COLUMNS,
    ROLLOUT_COLUMNS,
    SPLIT_COLUMNS,
    TENANT_COLUMNS,
    deletion_of,
    model_of,
    rollout_of,
    split_of,
    tenant_of,
)
from headway.registry.errors import (
    DuplicateKey,
    RolloutActive,
    UnknownModel,
    UnknownRollout,
    UnknownTenant,
)
from headway.registry.keys import key_digest
from headway.registry.model import (
    ACTIVE_STATES,
    ApiKey,
    ModelRecord,
    Role,
    Rollout,
    Split,
    Tenant,
    TenantDeletion,
    key_id_of,
)
from headway.storage.dialect import Tx

ACTIVE = f"state IN ({', '.join(repr(state) for state in sorted(ACTIVE_STATES))})"
"""A rollout's row is in ``ACTIVE_STATES``: the condition, as SQL."""


def changes(tx: Tx) -> int:
    row = tx.one("SELECT changes FROM registry_state WHERE id = 1")
    assert row is not None, "migration 5 inserts the one row"
    return int(row[0])


def ever_held_principals(tx: Tx) -> bool:
    """Whether the registry holds a tenant or a key, or ever held one: its rows may be gone,
    but the audit log keeps every write to them (targets ``tenant:…`` and ``key:…``)."""
    row = tx.one(
        "SELECT EXISTS (SELECT 1 FROM tenants) OR EXISTS (SELECT 1 FROM api_keys)"
        " OR EXISTS (SELECT 1 FROM audit_log WHERE target LIKE ? OR target LIKE ?)",
        ("tenant:%", "key:%"),
    )
    return row is not None and bool(row[0])


def tenant(tx: Tx, name: str) -> Tenant | None:
    row = tx.one(f"SELECT {TENANT_COLUMNS} FROM tenants WHERE name = ?", (name,))
    return None if row is None else tenant_of(row)


def next_tenant_id(tx: Tx) -> int:
    """An id no tenant ever had, recorded as the highest given (in a write: it holds the
    lock). Above every id there now too: a tenant another writer added without it."""
    given = tx.one("SELECT last_tenant_id FROM registry_state WHERE id = 1")
    present = tx.one("SELECT COALESCE(MAX(id), 0) FROM tenants")
    assert given is not None and present is not None, "migration 5 inserts the one row"
    tenant_id = max(int(given[0]), int(present[0])) + 1
    tx.execute("UPDATE registry_state SET last_tenant_id = ? WHERE id = 1", (tenant_id,))
    return tenant_id


def deletions(tx: Tx, *, pending: bool = True) -> list[TenantDeletion]:
    """Oldest first; ``pending``: only those not finished."""
    condition = " WHERE finished_at IS NULL" if pending else ""
    rows = tx.all(
        f"SELECT {DELETION_COLUMNS} FROM tenant_deletions{condition} ORDER BY deleted_at, tenant_id"
    )
    return [deletion_of(row, tx.parsed) for row in rows]


def existing_tenant(tx: Tx, name: str) -> Tenant:
    found = tenant(tx, name)
    if found is None:
        raise UnknownTenant(f"no tenant named {name!r}")
    return found


def insert_key(tx: Tx, key: str, tenant: Tenant | None, role: Role, now: float) -> ApiKey:
    digest = key_digest(key)
    if tx.one("SELECT 1 FROM api_keys WHERE key_digest = ?", (digest,)):
        raise DuplicateKey("that API key is already registered")
    key_id = key_id_of(digest)
    tx.execute(
        "INSERT INTO api_keys (key_digest, key_id, tenant_id, role, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (digest, key_id, None if tenant is None else tenant.id, role, now),
    )
    return ApiKey(key_id, None if tenant is None else tenant.name, role, now, None, None)


def is_live(key: ApiKey, now: float) -> bool:
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > now)


def model(tx: Tx, version: str) -> ModelRecord | None:
    row = tx.one(f"SELECT {MODEL_COLUMNS} FROM models WHERE version = ?", (version,))
    return None if row is None else model_of(row)


def existing_model(tx: Tx, version: str) -> ModelRecord:
    record = model(tx, version)
    if record is None:
        raise UnknownModel(f"no model version {version!r}")
    return record


def alias_version(tx: Tx, alias: str) -> str | None:
    row = tx.one("SELECT version FROM aliases WHERE alias = ?", (alias,))
    return None if row is None else str(row[0])


def point_alias(tx: Tx, alias: str, version: str, now: float) -> Split | None:
    """Point ``alias`` at ``version`` and drop its split; the split dropped."""
    removed = split(tx, alias)
    tx.execute("DELETE FROM splits WHERE alias = ?", (alias,))
    tx.execute(
        "INSERT INTO aliases (alias, version, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (alias) DO UPDATE SET version = excluded.version,"
        " updated_at = excluded.updated_at",
        (alias, version, now),
    )
    return removed


def split(tx: Tx, alias: str) -> Split | None:
    row = tx.one(f"SELECT {SPLIT_COLUMNS} FROM splits WHERE alias = ?", (alias,))
    return None if row is None else split_of(row, tx.parsed)


def splits(tx: Tx) -> list[Split]:
    return [split_of(row, tx.parsed) for row in tx.all(f"SELECT {SPLIT_COLUMNS} FROM splits")]


def put_split(tx: Tx, split: Split, now: float) -> None:
    shadow = split.shadow
    tx.execute(
        "INSERT INTO splits (alias, weights, sticky, pins, shadow_version, shadow_share,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (alias) DO UPDATE SET weights = excluded.weights,"
        " sticky = excluded.sticky, pins = excluded.pins,"
        " shadow_version = excluded.shadow_version, shadow_share = excluded.shadow_share,"
        " updated_at = excluded.updated_at",
        (
            split.alias,
            tx.json([list(pair) for pair in split.weights]),
            split.sticky,
            tx.json([list(pair) for pair in split.pins]),
            None if shadow is None else shadow.version,
            None if shadow is None else shadow.share,
            now,
        ),
    )


def check_split_names(tx: Tx, split: Split) -> None:
    """The alias, every version and every pinned tenant a split names exist."""
    if alias_version(tx, split.alias) is None:
        raise UnknownModel(f"no alias named {split.alias!r}")
    for version in sorted(split.versions()):
        existing_model(tx, version)
    for tenant, _ in split.pins:
        existing_tenant(tx, tenant)


def refuse_if_active(tx: Tx, alias: str) -> None:
    row = tx.one(f"SELECT id, state FROM rollouts WHERE alias = ? AND {ACTIVE}", (alias,))
    if row is not None:
        raise RolloutActive(f"rollout {row[0]} ({row[1]}) owns the split of {alias!r}")


def existing_rollout(tx: Tx, rollout_id: int) -> Rollout:
    row = tx.one(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?", (rollout_id,))
    if row is None:
        raise UnknownRollout(f"no rollout has the id {rollout_id}")
    return rollout_of(row, tx.parsed)
