"""What a registry write can refuse, each rule its own error.

    RegistryError
    ├── InvalidTenant        a value no tenant may have
    │   ├── UnknownTier      a tier other than interactive or batch
    │   └── InvalidQuota     a rate or burst that is not a positive, finite number
    ├── DuplicateTenant      a tenant of that name exists already
    ├── UnknownTenant        no tenant has that name
    ├── DuplicateKey         the API key is some tenant's or the operator's already
    └── UnknownModelKind     a model kind other than embedding or cross-encoder

The registry checks each rule before it writes, inside the write's transaction;
the schema's own constraints stay as a backstop, and one that fails anyway (two
writers adding the same name at once) is reported as the rule it guards, never
as ``sqlite3.IntegrityError``.
"""

from __future__ import annotations


class RegistryError(Exception):
    """A registry write broke one of the registry's rules; the message says which."""


class InvalidTenant(RegistryError):
    """A tenant field has a value no tenant may have."""


class UnknownTier(InvalidTenant):
    """The tier is not one of ``TIERS``."""


class InvalidQuota(InvalidTenant):
    """A quota rate or burst is zero, negative, infinite or not a number."""


class DuplicateTenant(RegistryError):
    """A tenant of that name exists already."""


class UnknownTenant(RegistryError):
    """No tenant has that name."""


class DuplicateKey(RegistryError):
    """The API key is already registered, to a tenant or as an admin key."""


class UnknownModelKind(RegistryError):
    """A model's kind is not one of ``MODEL_KINDS``."""
