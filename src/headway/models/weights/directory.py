"""Another local store as a weights source: a shared volume, or a test's second store.

``store_listing`` is also what a gateway serves as ``GET /v1/weights/{version}``: the
hashes ``put`` recorded beside the artifact when they hash to its version (no 90 MB
read per listing), else the files hashed now. Either way the listing says what the
artifact should be; a file changed since is caught by whoever fetches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.models.store import ARTIFACT_FILES, ModelStore, artifact_hashes, listing_version
from headway.models.weights.base import ArtifactFile, ArtifactListing

CHUNK_BYTES = 1 << 20


def store_listing(store: ModelStore, version: str) -> ArtifactListing:
    """``ModelNotFoundError`` for a version not stored; ``ModelIntegrityError`` for one
    whose files, hashed for want of a record, no longer make its version."""
    model = store.get(version)
    hashes = store.recorded_hashes(version)
    if hashes is None:
        hashes = artifact_hashes(model.path)
        if listing_version(hashes) != version:
            store.verify(version)  # raises, naming what it can
            raise ModelIntegrityError(f"model {version} no longer hashes to its version")
    files = [
        ArtifactFile(name, (model.path / name).stat().st_size, hashes[name])
        for name in sorted(hashes)
    ]
    return ArtifactListing(version, files, store.signature(version))


def artifact_file(store: ModelStore, version: str, name: str) -> Path:
    """The path of one of a stored artifact's files; ``ModelNotFoundError`` for any other
    name (nothing but the three files is ever served)."""
    model = store.get(version)
    if name not in ARTIFACT_FILES:
        raise ModelNotFoundError(f"model {version} has no file {name[:80]!r}")
    return model.path / name


class DirectorySource:
    def __init__(self, root: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._store = ModelStore(root)
        self._chunk_bytes = chunk_bytes

    def describe(self) -> str:
        return str(self._store.root)

    def listing(self, version: str) -> ArtifactListing:
        return store_listing(self._store, version)

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        with artifact_file(self._store, version, name).open("rb") as f:
            f.seek(offset)
            while chunk := f.read(self._chunk_bytes):
                yield chunk
