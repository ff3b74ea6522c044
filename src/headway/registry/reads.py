"""The registry's reads, on any ``Dialect``: each one read transaction, so what it
returns is one consistent state (``snapshot`` most of all)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from headway.registry import queries as q
from headway.registry.codec import (
    AUDIT_COLUMNS,
    KEY_COLUMNS,
    LIVE_KEY,
    MODEL_COLUMNS,
    OBSERVATION_COLUMNS,
    ROLLOUT_COLUMNS,
    SPLIT_COLUMNS,
    TENANT_COLUMNS,
    api_key_of,
    audit_of,
    model_of,
    observation_of,
    rollout_of,
    split_of,
    tenant_of,
)
from headway.registry.errors import UnknownTenant
from headway.registry.model import (
    ApiKey,
    AuditEntry,
    AuditQuery,
    ModelRecord,
    Observation,
    Principal,
    Rollout,
    Snapshot,
    Split,
    Tenant,
    TenantDeletion,
)
from headway.storage.dialect import Dialect, Tx


class RegistryReads:
    def __init__(self, dialect: Dialect, clock: Callable[[], float] = time.time) -> None:
        self._dialect = dialect
        self._clock = clock

    def close(self) -> None:
        self._dialect.close()

    def snapshot(self) -> Snapshot:
        """Tenants, live keys, models, aliases and splits as of one moment (one read
        transaction); a key revoked or expired by then is not in it."""
        now = self._clock()
        with self._dialect.read() as tx:
            tenants = {
                tenant.id: tenant
                for tenant in map(tenant_of, tx.all(f"SELECT {TENANT_COLUMNS} FROM tenants"))
            }
            key_rows = tx.all(
                f"SELECT k.key_digest, k.tenant_id, k.role, k.expires_at FROM api_keys k"
                f" WHERE {LIVE_KEY}",
                (now,),
            )
            models, splits, changes = _model_rows(tx)
        principals = {
            bytes(digest): Principal(
                role, None if tenant_id is None else tenants[tenant_id], bytes(digest), expires
            )
            for digest, tenant_id, role, expires in key_rows
        }
        by_name = {tenant.name: tenant for tenant in tenants.values()}
        return Snapshot(principals, models, splits, changes, by_name, tenants)

    def model_snapshot(self) -> Snapshot:
        """Models, aliases and splits as of one moment, without a tenant or a key: what a
        worker needs, and all its Postgres role may read (``privileges.py``)."""
        with self._dialect.read() as tx:
            models, splits, changes = _model_rows(tx)
        return Snapshot({}, models, splits, changes, {}, {})

    def changes(self) -> int:
        with self._dialect.read() as tx:
            return q.changes(tx)

    def tenants(self) -> list[Tenant]:
        with self._dialect.read() as tx:
            return [
                tenant_of(row)
                for row in tx.all(f"SELECT {TENANT_COLUMNS} FROM tenants ORDER BY name")
            ]

    def tenant(self, name: str) -> Tenant:
        with self._dialect.read() as tx:
            return q.existing_tenant(tx, name)

    def tenant_by_id(self, tenant_id: int) -> Tenant:
        with self._dialect.read() as tx:
            row = tx.one(f"SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?", (tenant_id,))
        if row is None:
            raise UnknownTenant(f"no tenant has the id {tenant_id}")
        return tenant_of(row)

    def billing_customers(self) -> dict[int, str]:
        with self._dialect.read() as tx:
            rows = tx.all("SELECT tenant_id, customer_id FROM billing_customers")
        return {int(row[0]): str(row[1]) for row in rows}

    def tenant_deletions(self, *, pending: bool = True) -> list[TenantDeletion]:
        with self._dialect.read() as tx:
            return q.deletions(tx, pending=pending)

    def keys(self, tenant: str | None) -> list[ApiKey]:
        order = "ORDER BY k.created_at DESC, k.key_id DESC"
        with self._dialect.read() as tx:
            if tenant is None:
                rows = tx.all(f"SELECT {KEY_COLUMNS} WHERE k.role = 'admin' {order}")
            else:
                tenant_id = q.existing_tenant(tx, tenant).id
                rows = tx.all(f"SELECT {KEY_COLUMNS} WHERE k.tenant_id = ? {order}", (tenant_id,))
        return [api_key_of(row) for row in rows]

    def models(self) -> list[tuple[ModelRecord, list[str]]]:
        with self._dialect.read() as tx:
            rows = tx.all(f"SELECT {MODEL_COLUMNS} FROM models ORDER BY name, version")
            alias_rows = tx.all("SELECT alias, version FROM aliases ORDER BY alias")
        by_version: dict[str, list[str]] = {}
        for alias, version in alias_rows:
            by_version.setdefault(version, []).append(alias)
        return [(model_of(row), by_version.get(row[0], [])) for row in rows]

    def model(self, version: str) -> ModelRecord:
        with self._dialect.read() as tx:
            return q.existing_model(tx, version)

    def resolve_model(self, name: str) -> ModelRecord | None:
        with self._dialect.read() as tx:
            version = q.alias_version(tx, name)
            return q.model(tx, name if version is None else version)

    def splits(self) -> list[Split]:
        with self._dialect.read() as tx:
            rows = tx.all(f"SELECT {SPLIT_COLUMNS} FROM splits ORDER BY alias")
            return [split_of(row, tx.parsed) for row in rows]

    def rollouts(self, alias: str | None = None, *, active: bool = False) -> list[Rollout]:
        where = [q.ACTIVE] if active else []
        params: list[Any] = []
        if alias is not None:
            where.append("alias = ?")
            params.append(alias)
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        with self._dialect.read() as tx:
            rows = tx.all(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts{condition} ORDER BY id DESC", params
            )
            return [rollout_of(row, tx.parsed) for row in rows]

    def rollout(self, rollout_id: int) -> Rollout:
        with self._dialect.read() as tx:
            return q.existing_rollout(tx, rollout_id)

    def audit(self, query: AuditQuery) -> list[AuditEntry]:
        """Newest first; ``since`` and ``until`` bound ``at`` as [since, until)."""
        where: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("actor = ?", query.actor),
            ("target = ?", query.target),
            ("at >= ?", query.since),
            ("at < ?", query.until),
            ("id < ?", query.before_id),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        if query.action is not None:
            prefix = query.action.endswith(".")
            where.append(f"substr(action, 1, {len(query.action)}) = ?" if prefix else "action = ?")
            params.append(query.action)
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        with self._dialect.read() as tx:
            rows = tx.all(
                f"SELECT {AUDIT_COLUMNS} FROM audit_log{condition} ORDER BY id DESC LIMIT ?",
                [*params, max(query.limit, 0)],
            )
            return [audit_of(row, tx.parsed) for row in rows]

    def observations(self, rollout_id: int, step: int) -> list[Observation]:
        with self._dialect.read() as tx:
            rows = tx.all(
                f"SELECT {OBSERVATION_COLUMNS} FROM observations"
                " WHERE rollout_id = ? AND step = ? ORDER BY gateway_id, role",
                (rollout_id, step),
            )
            return [observation_of(row, tx.parsed) for row in rows]


def _model_rows(tx: Tx) -> tuple[dict[str, ModelRecord], dict[str, Split], int]:
    """Models by version and by alias, splits by alias, and the change counter."""
    models = {
        record.version: record
        for record in map(model_of, tx.all(f"SELECT {MODEL_COLUMNS} FROM models"))
    }
    for alias, version in tx.all("SELECT alias, version FROM aliases"):
        models[alias] = models[version]
    splits = {
        split.alias: split
        for split in (
            split_of(row, tx.parsed) for row in tx.all(f"SELECT {SPLIT_COLUMNS} FROM splits")
        )
    }
    return models, splits, q.changes(tx)
