"""A versioned schema, as the ledger and the registry both keep one: ordered migrations,
each its statements for SQLite and for Postgres, and which of them a database lacks.

On Postgres a component's own role (``headway db roles``) may read and write rows but
never create a table, so opening an up-to-date database must run no DDL at all: the
record table is created only where it is absent (``RECORD_EXISTS``), and a database
that lacks migrations opened by a role that may not apply them fails with
``SchemaNotMigrated``, naming the command the owner runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

RECORD_EXISTS = {
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgres": "SELECT count(*) FROM pg_catalog.pg_tables"
    " WHERE schemaname = current_schema() AND tablename = ?",
}
"""One row, 1 if the table named by the parameter exists (0 if not), in either dialect."""

MAY_MIGRATE = "SELECT has_schema_privilege(current_schema(), 'CREATE')"
"""Postgres: one row, whether this role may create tables (apply a migration) here."""


class SchemaNotMigrated(RuntimeError):
    """The database lacks migrations and this role may not apply them: the owner must."""

    def __init__(self, what: str, versions: list[int]) -> None:
        super().__init__(
            f"the {what}'s database lacks schema versions {versions} and this Postgres role"
            " may not apply them: run `headway db migrate` (or `headway db roles`) with the"
            " owner's URL first"
        )


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    def statements(self, dialect: Literal["sqlite", "postgres"]) -> tuple[str, ...]:
        return self.sqlite if dialect == "sqlite" else self.postgres


def pending(
    applied: set[int], migrations: tuple[Migration, ...], *, too_new: type[Exception], what: str
) -> list[Migration]:
    """The migrations ``applied`` lacks, in order; ``too_new`` if it holds versions this
    code does not know (``what`` names the database in the message)."""
    unknown = applied - {migration.version for migration in migrations}
    if unknown:
        raise too_new(
            f"the {what}'s database has schema versions {sorted(unknown)} this code does not"
            " know; run the code that migrated it"
        )
    return [migration for migration in migrations if migration.version not in applied]


class Statements(Protocol):
    """What ``apply`` needs of an open write transaction (``registry.dialect.Tx``)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


def ensure_record(
    tx: Statements,
    dialect: Literal["sqlite", "postgres"],
    table: str,
    create: str,
    *,
    what: str,
    migrations: tuple[Migration, ...],
) -> None:
    """Run ``create`` (the record table's ``CREATE TABLE``) only if ``table`` is absent: a
    role without the right to create tables opens an up-to-date database, and one that
    finds no schema at all gets ``SchemaNotMigrated``."""
    ((count,),) = tx.all(RECORD_EXISTS[dialect], (table,))
    if not count:
        refuse_unless_allowed(tx, dialect, what, list(migrations))
        tx.execute(create)


def refuse_unless_allowed(
    tx: Statements, dialect: Literal["sqlite", "postgres"], what: str, todo: list[Migration]
) -> None:
    """``SchemaNotMigrated`` if ``todo`` is not empty and this Postgres role may not apply
    it (a component's role opening a database nobody migrated yet)."""
    if todo and dialect == "postgres":
        ((allowed,),) = tx.all(MAY_MIGRATE)
        if not allowed:
            raise SchemaNotMigrated(what, [migration.version for migration in todo])


def apply(
    tx: Statements,
    dialect: Literal["sqlite", "postgres"],
    table: str,
    todo: list[Migration],
    applied_at: float,
) -> list[int]:
    """Run ``todo`` (from ``pending``) in ``tx``, each recorded in ``table`` (version,
    applied_at); the versions applied."""
    for migration in todo:
        for statement in migration.statements(dialect):
            tx.execute(statement)
        tx.execute(
            f"INSERT INTO {table} (version, applied_at) VALUES (?, ?)",
            (migration.version, applied_at),
        )
    return [migration.version for migration in todo]
