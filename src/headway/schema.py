"""A versioned schema, as the ledger and the registry both keep one: ordered migrations,
each its statements for SQLite and for Postgres, and which of them a database lacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


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
