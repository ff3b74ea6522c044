"""The one table from a registry refusal to the HTTP error the admin API answers.

    Unknown*                                   → NotFound          404
    Duplicate*, RolloutActive, LastAdminKey,
    AliasInUse                                 → Conflict          409
    Invalid*, UnknownTier, UnknownModelKind    → ValidationFailed  422
    RegistryUnavailable                        → RegistryUnavailable 503

``UnknownTier`` and ``UnknownModelKind`` are about a value in the body, not a thing
that is missing, so they are 422s although their names start with Unknown. Anything
else (``SchemaTooNew``: this code is older than the database) is no refusal but a
fault, and stays a 500.
"""

from __future__ import annotations

from headway import errors
from headway.errors import Conflict, HeadwayError, NotFound, ValidationFailed
from headway.registry.errors import (
    AliasInUse,
    DuplicateKey,
    DuplicateTenant,
    InvalidGate,
    InvalidOverlap,
    InvalidRollout,
    InvalidSplit,
    InvalidTenant,
    LastAdminKey,
    RegistryError,
    RegistryUnavailable,
    RolloutActive,
    UnknownKey,
    UnknownModel,
    UnknownModelKind,
    UnknownRollout,
    UnknownTenant,
)

_TABLE: tuple[tuple[tuple[type[RegistryError], ...], type[HeadwayError]], ...] = (
    (
        (
            InvalidTenant,
            InvalidOverlap,
            InvalidSplit,
            InvalidGate,
            InvalidRollout,
            UnknownModelKind,
        ),
        ValidationFailed,
    ),
    ((UnknownTenant, UnknownKey, UnknownModel, UnknownRollout), NotFound),
    ((DuplicateTenant, DuplicateKey, RolloutActive, LastAdminKey, AliasInUse), Conflict),
    ((RegistryUnavailable,), errors.RegistryUnavailable),
)


def refusal(exc: RegistryError) -> HeadwayError | None:
    """The client error for ``exc``, with its message (the rule it broke); None for a fault."""
    for kinds, error in _TABLE:
        if isinstance(exc, kinds):
            return error(str(exc))
    return None
