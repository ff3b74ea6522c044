"""The owner's work on a shared Postgres: every schema migrated, every component's role
made (``privileges.py``), and the URL each component connects with.

Run as the owner: the role in ``postgres_url`` must own the tables (it creates them on a
new database) and may create roles (CREATEROLE, or a superuser). Both steps are
idempotent; ``apply_roles`` runs in one transaction, so a component never sees its
grants half revoked.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from headway.privileges import COMPONENTS, Component, all_statements, role_name


class DbSetupError(RuntimeError):
    """The owner's URL cannot migrate the database or make the roles (the message says why)."""


def migrate_all(owner_url: str) -> None:
    """Apply every missing migration of the registry, the ledger, the batch store and the
    quality store, by opening each as the owner (each applies its own on open)."""
    from headway.batches.open import postgres_batch_store
    from headway.billing.ledger.postgres import PostgresLedger
    from headway.quality.references import postgres_reference_store
    from headway.registry.postgres import PostgresRegistry

    async def ledger() -> None:
        await (await PostgresLedger.open(owner_url)).close()

    try:
        PostgresRegistry(owner_url).close()
        postgres_batch_store(owner_url).close()
        postgres_reference_store(owner_url).close()
        asyncio.run(ledger())
    except Exception as exc:  # each store's own errors, or the driver's: one message
        raise DbSetupError(f"cannot migrate with this URL: {exc}") from exc


def apply_roles(
    owner_url: str, prefix: str, passwords: Mapping[Component, str] | None = None
) -> dict[Component, str]:
    """Make (or re-make) every component's role with exactly its grants; set the password
    of each component named in ``passwords`` (the others keep theirs). The role names."""
    passwords = passwords or {}
    try:
        with psycopg.connect(owner_url, autocommit=True) as conn, conn.transaction():
            for statement in all_statements(prefix):
                conn.execute(statement.encode())
            for component, password in passwords.items():
                conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(role_name(prefix, component)), sql.Literal(password)
                    )
                )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DbSetupError(
            f"this role may not make the components' roles ({exc.diag.message_primary});"
            " run it with the owner's URL: the role that owns the tables, with CREATEROLE"
        ) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise DbSetupError(
            f"a table is missing ({exc.diag.message_primary}): run `headway db migrate` first"
        ) from exc
    except psycopg.OperationalError as exc:
        raise DbSetupError(f"cannot reach Postgres: {exc}") from exc
    return {component: role_name(prefix, component) for component in COMPONENTS}


def component_url(owner_url: str, role: str, password: str | None = None) -> str:
    """``owner_url`` with its user (and password) replaced by ``role``'s: same host, port,
    database and options."""
    parts = urlsplit(owner_url)
    if parts.scheme not in {"postgres", "postgresql"} or parts.hostname is None:
        raise DbSetupError("postgres_url must be a postgresql://user@host:port/db URL")
    user = quote(role, safe="")
    if password is not None:
        user += ":" + quote(password, safe="")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{user}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def fresh_component_urls(owner_url: str, prefix: str) -> dict[Component, str]:
    """Migrate, make every role with a new random password, and each component's URL:
    ``headway up``'s shared mode, whose processes live as long as the passwords do."""
    passwords: dict[Component, str] = {c: secrets.token_hex(16) for c in COMPONENTS}
    migrate_all(owner_url)
    roles = apply_roles(owner_url, prefix, passwords)
    return {c: component_url(owner_url, role, passwords[c]) for c, role in roles.items()}
