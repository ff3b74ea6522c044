"""A versioned schema, as the ledger and the registry both keep one: ordered migrations,
each its statements for SQLite and for Postgres, and which of them a database lacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
