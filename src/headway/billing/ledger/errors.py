"""What a ledger raises; callers catch ``LedgerError``.

::

    LedgerError
    ├── LedgerUnavailable   the database cannot be reached, or went away mid-call
    ├── SchemaTooNew        the database was migrated by newer code than this
    └── UnknownIntent       ``mark_sent`` for a key no ``plan_exports`` recorded

A batch that failed with ``LedgerUnavailable`` may or may not have committed; writing
it again is always safe (the ledger drops what it already holds).
"""

from __future__ import annotations


class LedgerError(RuntimeError):
    """A ledger could not do what was asked."""


class LedgerUnavailable(LedgerError):
    """The ledger's database cannot be reached or failed mid-call; retry the call."""


class SchemaTooNew(LedgerError):
    """The database holds migrations this code does not know: run the newer code."""


class UnknownIntent(LedgerError):
    """No export intent has that key."""
