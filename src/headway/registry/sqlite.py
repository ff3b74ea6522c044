"""The registry on SQLite: tenants, key digests, model versions and aliases.

Writers are the CLI, ``headway up``'s first start and the benchmarks; the gateway
only reads, taking a whole ``Snapshot`` at a time (WAL mode lets it read while a
CLI writes). Every write keeps the rules of ``rules`` and ``errors``, whoever
writes: values are checked first, then the write runs in one transaction that
holds the write lock from its start (``BEGIN IMMEDIATE``), so what it checks
(does the name exist? the key?) cannot change before it writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headway.registry.errors import DuplicateKey, DuplicateTenant, UnknownTenant
from headway.registry.errors import RegistryError as RegistryError  # callers catch it here
from headway.registry.keys import key_digest, new_key
from headway.registry.model import ModelRecord, Principal, Snapshot, Tenant, Tier
from headway.registry.rules import model_kind, quota_value, tier_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    tier TEXT NOT NULL CHECK (tier IN ('interactive', 'batch')),
    rate_texts_per_s REAL NOT NULL CHECK (rate_texts_per_s > 0),
    burst_texts REAL NOT NULL CHECK (burst_texts > 0),
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_digest BLOB PRIMARY KEY,
    tenant_id INTEGER REFERENCES tenants (id),
    role TEXT NOT NULL CHECK (role IN ('tenant', 'admin')),
    created_at REAL NOT NULL,
    revoked_at REAL,
    CHECK ((role = 'admin') = (tenant_id IS NULL))
);
CREATE TABLE IF NOT EXISTS models (
    version TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('embedding', 'cross-encoder')),
    dimensions INTEGER NOT NULL,
    quantization TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS aliases (
    alias TEXT PRIMARY KEY,
    version TEXT NOT NULL REFERENCES models (version),
    updated_at REAL NOT NULL
);
"""

DEFAULT_RATE = {"interactive": 200.0, "batch": 500.0}
DEFAULT_BURST = {"interactive": 400.0, "batch": 2000.0}

# Documented in README.md: replace before exposing anything.
DEMO_TENANTS: tuple[tuple[str, Tier, str], ...] = (
    ("search-app", "interactive", "demo-key-search-app"),
    ("support-bot", "interactive", "demo-key-support-bot"),
    ("nightly-index", "batch", "demo-key-nightly-index"),
)
DEMO_ADMIN_KEY = "demo-admin-key"
_TENANT_COLUMNS = "id, name, tier, rate_texts_per_s, burst_texts"


class Registry:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10)
        try:
            db.execute("PRAGMA foreign_keys=ON")
            with db:
                yield db
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the write lock throughout; a rule error rolls it back."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except sqlite3.IntegrityError as exc:  # a schema check no rule here foresaw
                raise RegistryError(f"the registry refused the write: {exc}") from exc

    # tenants and keys -------------------------------------------------------

    def add_tenant(
        self,
        name: str,
        tier: str,
        *,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
        key: str | None = None,
    ) -> tuple[Tenant, str]:
        """Create a tenant and its first key; the key is returned once, never stored.

        The quota defaults to the tier's (``DEFAULT_RATE``, ``DEFAULT_BURST``).
        """
        checked = tier_of(tier)
        rate = quota_value(
            "rate_texts_per_s",
            DEFAULT_RATE[checked] if rate_texts_per_s is None else rate_texts_per_s,
        )
        burst = quota_value(
            "burst_texts", DEFAULT_BURST[checked] if burst_texts is None else burst_texts
        )
        key = key or new_key()
        digest = key_digest(key)
        now = time.time()
        with self._write() as db:
            if _tenant(db, name) is not None:
                raise DuplicateTenant(f"tenant {name!r} already exists")
            _check_new_key(db, digest)
            cursor = db.execute(
                "INSERT INTO tenants (name, tier, rate_texts_per_s, burst_texts, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (name, checked, rate, burst, now),
            )
            tenant_id = cursor.lastrowid
            db.execute(
                "INSERT INTO api_keys (key_digest, tenant_id, role, created_at)"
                " VALUES (?, ?, 'tenant', ?)",
                (digest, tenant_id, now),
            )
        assert tenant_id is not None
        return Tenant(tenant_id, name, checked, rate, burst), key

    def update_tenant(
        self,
        name: str,
        *,
        tier: str | None = None,
        rate_texts_per_s: float | None = None,
        burst_texts: float | None = None,
    ) -> Tenant:
        """Change a tenant's tier or quota; gateways pick it up on their next refresh."""
        changes: dict[str, str | float] = {}
        if tier is not None:
            changes["tier"] = tier_of(tier)
        if rate_texts_per_s is not None:
            changes["rate_texts_per_s"] = quota_value("rate_texts_per_s", rate_texts_per_s)
        if burst_texts is not None:
            changes["burst_texts"] = quota_value("burst_texts", burst_texts)
        with self._write() as db:
            if _tenant(db, name) is None:
                raise UnknownTenant(f"no tenant named {name!r}")
            if changes:
                assignments = ", ".join(f"{column} = ?" for column in changes)
                db.execute(
                    f"UPDATE tenants SET {assignments} WHERE name = ?", (*changes.values(), name)
                )
            tenant = _tenant(db, name)
        assert tenant is not None
        return tenant

    def add_admin_key(self, key: str | None = None) -> str:
        key = key or new_key()
        digest = key_digest(key)
        with self._write() as db:
            _check_new_key(db, digest)
            db.execute(
                "INSERT INTO api_keys (key_digest, tenant_id, role, created_at)"
                " VALUES (?, NULL, 'admin', ?)",
                (digest, time.time()),
            )
        return key

    def tenants(self) -> list[Tenant]:
        with self._connect() as db:
            rows = db.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants ORDER BY name").fetchall()
        return [Tenant(*row) for row in rows]

    def seed_demo(self) -> bool:
        """On a registry with no tenants, create the documented demo tenants and keys."""
        with self._connect() as db:
            (count,) = db.execute("SELECT count(*) FROM tenants").fetchone()
        if count:
            return False
        for name, tier, key in DEMO_TENANTS:
            self.add_tenant(name, tier, key=key)
        self.add_admin_key(DEMO_ADMIN_KEY)
        return True

    # models and aliases -----------------------------------------------------

    def add_model(self, record: ModelRecord, aliases: tuple[str, ...] = ()) -> None:
        """Record a model version (once: versions are content hashes) and point ``aliases``
        at it, moving any that named another version."""
        model_kind(record.kind)
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT INTO models"
                " (version, name, kind, dimensions, quantization, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (version) DO NOTHING",
                (
                    record.version,
                    record.name,
                    record.kind,
                    record.dimensions,
                    record.quantization,
                    now,
                ),
            )
            for alias in aliases:
                db.execute(
                    "INSERT INTO aliases (alias, version, updated_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (alias) DO UPDATE SET version = excluded.version,"
                    " updated_at = excluded.updated_at",
                    (alias, record.version, now),
                )

    def models(self) -> list[tuple[ModelRecord, list[str]]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT version, name, kind, dimensions, quantization FROM models ORDER BY name"
            ).fetchall()
            alias_rows = db.execute("SELECT alias, version FROM aliases ORDER BY alias").fetchall()
        by_version: dict[str, list[str]] = {}
        for alias, version in alias_rows:
            by_version.setdefault(version, []).append(alias)
        return [(ModelRecord(*row), by_version.get(row[0], [])) for row in rows]

    def resolve_model(self, name: str) -> ModelRecord | None:
        return self.snapshot().resolve_model(name)

    # the gateway's view -----------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._connect() as db:
            tenants = {
                row[0]: Tenant(*row) for row in db.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants")
            }
            key_rows = db.execute(
                "SELECT key_digest, tenant_id, role FROM api_keys WHERE revoked_at IS NULL"
            ).fetchall()
            model_rows = db.execute(
                "SELECT version, name, kind, dimensions, quantization FROM models"
            ).fetchall()
            alias_rows = db.execute("SELECT alias, version FROM aliases").fetchall()
        principals = {
            bytes(digest): Principal(
                role, tenants.get(tenant_id) if tenant_id else None, bytes(digest)
            )
            for digest, tenant_id, role in key_rows
        }
        models = {row[0]: ModelRecord(*row) for row in model_rows}
        for alias, version in alias_rows:
            models[alias] = models[version]
        return Snapshot(principals, models)


def _tenant(db: sqlite3.Connection, name: str) -> Tenant | None:
    row = db.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE name = ?", (name,)).fetchone()
    return None if row is None else Tenant(*row)


def _check_new_key(db: sqlite3.Connection, digest: bytes) -> None:
    if db.execute("SELECT 1 FROM api_keys WHERE key_digest = ?", (digest,)).fetchone():
        raise DuplicateKey("that API key is already registered")
