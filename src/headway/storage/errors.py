"""What a dialect raises when its database fails a call, in its store's own terms."""

from __future__ import annotations

from dataclasses import dataclass


class StorageError(Exception):
    """The database refused a write (a constraint no rule of the store foresaw)."""


class StorageUnavailable(StorageError):
    """The database cannot be reached, or stayed locked past the timeout."""


@dataclass(frozen=True)
class Failures:
    """The errors a dialect raises for its store, and the store's name in their messages
    (the registry's are ``RegistryError`` and ``RegistryUnavailable``)."""

    refused: type[Exception] = StorageError
    unavailable: type[Exception] = StorageUnavailable
    what: str = "the database"


STORAGE = Failures()
"""A store that translates the storage errors itself (the batch store, quality)."""
