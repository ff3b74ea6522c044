"""What the registry raises: each rule a write can break its own error, and the two
ways its database can fail it (``RegistryUnavailable``, ``SchemaTooNew``).

The registry checks each rule before it writes, inside the write's transaction; the schema's
own constraints stay as a backstop, and one that fails anyway (two writers adding the same name
at once) is reported as the rule it guards, never as ``sqlite3.IntegrityError``.
"""

from __future__ import annotations

from headway.storage.errors import Failures


class RegistryError(Exception):
    """A registry write broke one of the registry's rules; the message says which."""


class RegistryUnavailable(RegistryError):
    """The registry's database cannot be reached, or stayed locked past the timeout."""


class SchemaTooNew(RegistryError):
    """The database holds registry migrations this code does not know: run the newer code."""


class InvalidTenant(RegistryError):
    """A tenant field has a value no tenant may have."""


class InvalidTenantName(InvalidTenant):
    """A new tenant's name breaks ``TENANT_NAME_RULE``."""


class UnknownTier(InvalidTenant):
    """The tier is not one of ``TIERS``."""


class InvalidQuota(InvalidTenant):
    """A quota rate or burst is zero, negative, infinite or not a number."""


class InvalidLimit(InvalidTenant):
    """A tenant's Batch API bound is not one of ``BATCH_LIMITS``, or not a whole number
    from 0 to 2**63 - 1."""


class InvalidBillingCustomer(InvalidTenant):
    """A billing provider customer id is empty, too long, or not printable ASCII."""


class DuplicateTenant(RegistryError):
    """A tenant of that name exists already."""


class UnknownTenant(RegistryError):
    """No tenant has that name."""


class AliasInUse(RegistryError):
    """An alias to delete has a rollout's history (or a split) that names it."""


class DuplicateKey(RegistryError):
    """The API key is already registered, to a tenant or as an admin key."""


class UnknownModelKind(RegistryError):
    """A model's kind is not one of ``MODEL_KINDS``."""


class UnknownKey(RegistryError):
    """No API key has that id."""


class InvalidOverlap(RegistryError):
    """A key rotation's overlap is negative or not a finite number of seconds."""


class LastAdminKey(RegistryError):
    """Revoking this key would leave the registry without a live admin key."""


class UnknownModel(RegistryError):
    """No model version has that hash, or no alias that name."""


class InvalidGate(RegistryError):
    """A variant gate whose figures are not agreements (0 to 1)."""


class InvalidSplit(RegistryError):
    """A split's weights, pins or shadow break a rule (the message says which)."""


class UnknownRollout(RegistryError):
    """No rollout has that id."""


class InvalidRollout(RegistryError):
    """A rollout plan breaks a rule, or its state forbids the move asked for."""


class RolloutActive(RegistryError):
    """A rollout owns this alias's split until it ends; pause or abort it first."""


REGISTRY = Failures(RegistryError, RegistryUnavailable, "the registry")
"""What the registry's dialect raises when its database fails a call."""
