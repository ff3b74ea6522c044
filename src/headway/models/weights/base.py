"""The seam between the local store and wherever artifacts come from.

A ``WeightsSource`` answers two questions about a version: its listing (each file's
name, size and SHA-256, and the signature if it has one), and the bytes of one file
from an offset on, as an iterator of chunks. Nothing else: no writes, no lists of
versions. The fetcher (``fetch.py``) trusts neither answer: it checks the listing
against the version (``check_listing``) and every file against the listing, so a
source needs no integrity of its own, only the bytes.

Here: ``DirectorySource`` (another store on a path: a shared volume, tests) and
``HttpSource`` (a gateway's ``/v1/weights`` routes). An S3-style object store
implements it with objects named after the store's own layout:

- ``<version>/<name>``, one object per file: ``read`` is a ``GET`` with
  ``Range: bytes=<offset>-`` (S3, GCS and Azure Blob all take it), its body streamed;
- ``<version>.sha256`` (the ``sha256sum`` record ``ModelStore.put`` writes) and, if
  signed, ``<version>.sig``: ``listing`` reads both, and the sizes from one
  ``ListObjectsV2`` with ``Prefix=<version>/`` (or a ``HEAD`` per file).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol

import msgspec

from headway.models.errors import ModelIntegrityError
from headway.models.store import ARTIFACT_FILES, listing_version

_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    size: int
    """Bytes."""
    sha256: str
    """Hex digest of the file's bytes."""


class ArtifactListing(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a source says an artifact is: ``GET /v1/weights/{version}``'s body."""

    version: str
    files: list[ArtifactFile]
    """Sorted by name."""
    signature: str | None = None
    """Base64 ed25519 signature over the version string, if the artifact was signed."""

    def file(self, name: str) -> ArtifactFile | None:
        return next((f for f in self.files if f.name == name), None)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class WeightsSource(Protocol):
    """Where artifacts come from, by version (see the module docstring)."""

    def listing(self, version: str) -> ArtifactListing:
        """``ModelNotFoundError`` if the source has no such version; ``WeightsUnavailable``
        if it cannot be asked."""
        ...

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        """The bytes of file ``name`` from ``offset`` to its end, a chunk at a time; it may
        end early (a cut connection): the caller counts what came."""
        ...

    def describe(self) -> str:
        """Where it reads from, for messages (a URL or a path; never a credential)."""
        ...


def check_listing(listing: ArtifactListing, version: str, origin: str) -> None:
    """``ModelIntegrityError`` unless ``listing`` names exactly the artifact's files, each
    once with a well-formed hash and size, and hashes to ``version`` (the store's formula):
    a listing that passes is as trustworthy as the version asked for."""
    names = [f.name for f in listing.files]
    if sorted(names) != sorted(ARTIFACT_FILES):
        raise ModelIntegrityError(
            f"the listing of model {version} from {origin} names {sorted(names)}, "
            f"not exactly {sorted(ARTIFACT_FILES)}"
        )
    for entry in listing.files:
        if _SHA256.fullmatch(entry.sha256) is None or entry.size < 0:
            raise ModelIntegrityError(
                f"the listing of model {version} from {origin} has a malformed entry for "
                f"{entry.name}: size {entry.size}, sha256 {entry.sha256[:80]!r}"
            )
    hashed = listing_version({f.name: f.sha256 for f in listing.files})
    if listing.version != version or hashed != version:
        raise ModelIntegrityError(
            f"the listing of model {version} from {origin} hashes to {hashed}, not to the "
            "version asked for"
        )
