"""Errors raised while importing, storing and loading model artifacts.

::

    ModelError
    ├── ModelNotFoundError
    ├── ModelIntegrityError
    │   └── ModelSignatureError
    ├── ModelImportError
    ├── InputRefused
    ├── ModelPreparationError
    ├── WeightsUnavailable
    └── SigningKeyInvalid
"""

from __future__ import annotations


class ModelError(Exception):
    """Base class for every model artifact error."""


class ModelNotFoundError(ModelError):
    """No artifact with the requested version is in the store."""


class ModelIntegrityError(ModelError):
    """An artifact's files no longer hash to its version, or are malformed."""


class ModelSignatureError(ModelIntegrityError):
    """An artifact's signature is missing where one is required, or no trusted key signed it."""


class ModelImportError(ModelError):
    """A source checkpoint could not be turned into an artifact."""


class InputRefused(ModelError):
    """An input the model cannot take as asked: a text over its token limit where the
    request forbade truncating it, a token id outside its vocabulary."""


class ModelPreparationError(ModelError):
    """An artifact's prepared (memory-mapped) copy could not be built."""


class WeightsUnavailable(ModelError):
    """A weights store could not be read: unreachable, refused our credential, or cut off."""


class SigningKeyInvalid(ModelError):
    """A signing key file cannot be used: missing, unreadable, or not an ed25519 key."""
