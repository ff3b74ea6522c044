"""The seam between a store's one SQL implementation (the registry's, the batch store's,
quality's) and a database.

A dialect opens transactions: ``read`` sees one consistent state of the database
for all its statements; ``write`` holds the database's write lock from its first
statement (SQLite ``BEGIN IMMEDIATE``, Postgres ``pg_advisory_xact_lock``) and
commits at the end, or rolls back on any error. Statements are written once, with
``?`` placeholders and SQL both databases speak; the dialect translates what
differs: placeholders, JSON columns (SQLite text, Postgres ``jsonb``), and its
driver's errors into its store's (``errors.Failures``: a constraint is ``refused``, an
unreachable or locked database ``unavailable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

DialectName = Literal["sqlite", "postgres"]

Row = tuple[Any, ...]


class Tx(Protocol):
    """One open transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def json(self, value: object) -> Any:
        """``value`` (JSON-able, or None for SQL NULL) as a parameter for a JSON column."""
        ...

    def parsed(self, value: Any) -> Any:
        """A JSON column's value as Python (None for SQL NULL)."""
        ...


class Dialect(Protocol):
    name: DialectName

    def read(self) -> AbstractContextManager[Tx]: ...

    def write(self, *, lock: bool = True) -> AbstractContextManager[Tx]:
        """``lock=False``: a write that needs no check-then-act (an upsert of counts),
        which need not wait for the admin writes' lock where the database allows."""
        ...

    def close(self) -> None:
        """Release any connection held between calls (the next call opens another)."""
        ...
