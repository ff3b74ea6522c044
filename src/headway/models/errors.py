"""Errors raised while importing, storing and loading model artifacts.

::

    ModelError
    ├── ModelNotFoundError
    ├── ModelIntegrityError
    └── ModelImportError
"""

from __future__ import annotations


class ModelError(Exception):
    """Base class for every model artifact error."""


class ModelNotFoundError(ModelError):
    """No artifact with the requested version is in the store."""


class ModelIntegrityError(ModelError):
    """An artifact's files no longer hash to its version, or are malformed."""


class ModelImportError(ModelError):
    """A source checkpoint could not be turned into an artifact."""
