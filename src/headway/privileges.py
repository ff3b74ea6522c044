"""Least privilege on Postgres: one login role per component, with only its grants.

In shared mode every component reaches one Postgres database. The owner (the role that runs
``headway db migrate`` / ``headway db roles``, and the admin CLI) owns the tables; each
component connects as its own role, ``<prefix>_<component>``, holding only what ``GRANTS``
lists, so a component that is broken into can do at most what its code does. Row-level security
on ``api_keys`` (``KEY_POLICIES``) lets the gateway create and rotate tenant keys only, and
change an admin key only into a revoked one: an admin key is the owner's to make.

``GRANTS`` is the one place the grants are written; ``role_statements`` turns it into SQL
(``headway db roles --sql``), re-applied whole each time: every privilege on the known tables is
revoked first, so a grant removed here is removed there too. A table a migration adds must be
listed here (``tests/service/test_privileges.py`` fails on one that is not). Pure: nothing here
touches a database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

Component = Literal["gateway", "worker", "billing", "executor"]
COMPONENTS: tuple[Component, ...] = get_args(Component)

Privilege = Literal["SELECT", "INSERT", "UPDATE", "DELETE"]
READ: tuple[Privilege, ...] = ("SELECT",)
APPEND: tuple[Privilege, ...] = ("SELECT", "INSERT")
CHANGE: tuple[Privilege, ...] = ("SELECT", "INSERT", "UPDATE")
ALL: tuple[Privilege, ...] = ("SELECT", "INSERT", "UPDATE", "DELETE")

REGISTRY = (
    "registry_migrations",
    "tenants",
    "api_keys",
    "models",
    "aliases",
    "splits",
    "rollouts",
    "observations",
    "audit_log",
    "registry_state",
    "tenant_deletions",
    "billing_customers",
)
LEDGER = (
    "schema_migrations",
    "processed_requests",
    "hourly_usage",
    "dead_letters",
    "export_intents",
    "export_watermark",
    "export_late_hours",
)
BATCHES = ("batch_migrations", "batch_files", "batches", "batch_results")
QUALITY = ("quality_migrations", "quality_references")
TABLES = REGISTRY + LEDGER + BATCHES + QUALITY
"""Every table headway's migrations create: the ones a role is revoked on first."""

GRANTS: Mapping[Component, Mapping[str, tuple[Privilege, ...]]] = {
    "gateway": {
        "registry_migrations": READ,
        "tenants": ALL,
        "api_keys": ALL,  # rows narrowed by KEY_POLICIES
        "models": CHANGE,
        "aliases": ALL,
        "splits": ALL,
        "rollouts": CHANGE,
        "observations": APPEND,
        "audit_log": APPEND,  # append-only: its trigger refuses UPDATE and DELETE anyway
        "registry_state": CHANGE,
        "tenant_deletions": CHANGE,
        "billing_customers": ALL,  # the admin API sets and clears a tenant's customer
        "schema_migrations": READ,
        "hourly_usage": READ,
        "batch_migrations": READ,
        "batch_files": ALL,
        "batches": ALL,
        "batch_results": ALL,  # a deleted tenant's results go with it
        "quality_migrations": READ,
        "quality_references": APPEND,
    },
    "worker": {
        "registry_migrations": READ,
        "models": READ,
        "aliases": READ,
        "splits": READ,
        "rollouts": READ,
        "registry_state": READ,
    },
    "billing": {
        "registry_migrations": READ,  # the export reads its customers from the registry
        "registry_state": READ,
        "billing_customers": READ,
        "schema_migrations": READ,
        "processed_requests": APPEND,
        "hourly_usage": CHANGE,  # INSERT … ON CONFLICT DO UPDATE adds to an hour's row
        "dead_letters": APPEND,
        "export_intents": CHANGE,
        "export_watermark": CHANGE,  # planning moves it; FOR SHARE needs UPDATE
        "export_late_hours": ("SELECT", "INSERT", "DELETE"),
    },
    "executor": {
        "registry_migrations": READ,
        "tenants": READ,
        "registry_state": READ,
        "batch_migrations": READ,
        "batch_files": ("SELECT", "INSERT", "DELETE"),  # output files in, expired ones out
        "batches": ("SELECT", "UPDATE"),
        "batch_results": ("SELECT", "INSERT", "DELETE"),
    },
}

KEY_POLICIES: Mapping[Component, Mapping[Literal["SELECT", "INSERT", "UPDATE", "DELETE"], str]] = {
    "gateway": {
        "SELECT": "true",  # it authenticates admin keys too
        "INSERT": "role = 'tenant'",
        # An admin key's row may change only into a revoked one (the admin API revokes).
        "UPDATE": "role = 'tenant' OR revoked_at IS NOT NULL",
        "DELETE": "role = 'tenant'",
    },
}
"""Row-level security on ``api_keys``: which rows each component may touch, by command.
The owner is not subject to it (it owns the table)."""

_PREFIX = re.compile(r"[a-z][a-z0-9_]{0,40}")


class RolesError(ValueError):
    """A role prefix or component that cannot name a Postgres role."""


@dataclass(frozen=True, slots=True)
class RoleStatements:
    """The SQL that makes one component's role what ``GRANTS`` says: ``create`` (run
    once per role, no password), ``grants`` (revoke all, grant the table, policies)."""

    role: str
    create: tuple[str, ...]
    grants: tuple[str, ...]


def role_name(prefix: str, component: Component) -> str:
    """``<prefix>_<component>``; the prefix separates two stacks on one Postgres cluster
    (roles are the cluster's, not a database's)."""
    if not _PREFIX.fullmatch(prefix):
        raise RolesError(
            f"postgres_roles.prefix {prefix!r}: lower-case letters, digits and _, a letter"
            " first, at most 41 characters"
        )
    if component not in COMPONENTS:
        raise RolesError(f"no component {component!r}: one of {', '.join(COMPONENTS)}")
    return f"{prefix}_{component}"


def role_statements(prefix: str, component: Component) -> RoleStatements:
    """The SQL for ``component``'s role (names are checked identifiers: safe to splice)."""
    role = role_name(prefix, component)
    create = (
        # CREATE ROLE has no IF NOT EXISTS; a role made before keeps its password.
        f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN"
        f" ALTER ROLE {role} LOGIN; END $$",
        # No other database, no schema of its own, nothing but what is granted below.
        f"ALTER ROLE {role} NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION",
    )
    grants: list[str] = [
        f"REVOKE ALL ON TABLE {', '.join(TABLES)} FROM {role}",
        # The schema the tables are in (``public``, or the URL's search_path): to name them.
        "DO $$ BEGIN EXECUTE format('GRANT USAGE ON SCHEMA %I TO "
        + role
        + "', current_schema()); END $$",
    ]
    by_privileges: dict[tuple[Privilege, ...], list[str]] = {}
    for table, privileges in GRANTS[component].items():
        by_privileges.setdefault(privileges, []).append(table)
    for privileges, tables in by_privileges.items():
        grants.append(f"GRANT {', '.join(privileges)} ON TABLE {', '.join(tables)} TO {role}")
    inserts = [table for table, privileges in GRANTS[component].items() if "INSERT" in privileges]
    if inserts:
        grants.append(_sequence_grants(role, inserts))
    grants += _key_policies(prefix, component)
    return RoleStatements(role, create, tuple(grants))


def all_statements(prefix: str) -> list[str]:
    """Every statement for every component, in order: what ``headway db roles --sql``
    prints (the owner runs it after the migrations)."""
    statements = [
        "ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY",
        # Postgres before 15 lets every role create tables in public: only the owner may.
        "DO $$ BEGIN EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC',"
        " current_schema()); END $$",
    ]
    for component in COMPONENTS:
        made = role_statements(prefix, component)
        statements += [*made.create, *made.grants]
    return statements


def _sequence_grants(role: str, tables: list[str]) -> str:
    """USAGE on the sequences behind the identity columns of ``tables`` (an INSERT takes
    the next id from one), found by the database: their names are its own."""
    names = ", ".join(f"'{table}'" for table in tables)
    return (
        "DO $$ DECLARE seq text; BEGIN FOR seq IN"
        " SELECT pg_get_serial_sequence(format('%I', c.table_name), c.column_name)"
        " FROM information_schema.columns c WHERE c.table_schema = current_schema()"
        f" AND c.table_name IN ({names})"
        " AND (c.is_identity = 'YES' OR c.column_default LIKE 'nextval(%')"
        f" LOOP EXECUTE format('GRANT USAGE ON SEQUENCE %s TO {role}', seq); END LOOP; END $$"
    )


def _key_policies(prefix: str, component: Component) -> list[str]:
    role = role_name(prefix, component)
    policies = KEY_POLICIES.get(component, {})
    statements = []
    for command in ("SELECT", "INSERT", "UPDATE", "DELETE"):
        name = f"{role}_{command.lower()}"
        statements.append(f"DROP POLICY IF EXISTS {name} ON api_keys")
        rows = policies.get(command)
        if rows is None:
            continue
        check = {
            "SELECT": f"USING ({rows})",
            "INSERT": f"WITH CHECK ({rows})",
            "UPDATE": f"USING (true) WITH CHECK ({rows})",
            "DELETE": f"USING ({rows})",
        }[command]
        statements.append(f"CREATE POLICY {name} ON api_keys FOR {command} TO {role} {check}")
    return statements
