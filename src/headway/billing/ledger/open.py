"""The ledger a deployment configures: Postgres (shared mode) when it names one, else
the SQLite file of embedded mode."""

from __future__ import annotations

from pathlib import Path

from headway.billing.ledger.base import Ledger
from headway.billing.ledger.errors import LedgerUnavailable
from headway.billing.ledger.sqlite import SQLiteLedger


async def open_ledger(postgres_url: str | None, sqlite_path: Path) -> Ledger:
    """The open, migrated ledger; ``LedgerUnavailable`` when its database cannot be
    reached."""
    if not postgres_url:
        return await SQLiteLedger.open(sqlite_path)
    try:  # imported here: embedded mode runs without asyncpg installed
        from headway.billing.ledger.postgres import PostgresLedger
    except ImportError as exc:
        raise LedgerUnavailable(f"a Postgres ledger needs asyncpg: {exc}") from exc
    return await PostgresLedger.open(postgres_url)
