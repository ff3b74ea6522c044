"""Bring an artifact from a ``WeightsSource`` into the local store: streamed, resumable,
verified before it is stored.

The source's listing is checked against the version first (``check_listing``), so a file
matching the listing matches the version. Each file is appended to
``<root>/.partial-<version>/<name>`` from its current size (a ranged read), so an
interrupted run keeps what it had; a whole file is hashed, and one that does not match is
deleted and the fetch fails naming both hashes. Then ``ModelStore.put`` renames the
directory into place, and the listing's signature, if any, is written beside it.

Two fetchers of one version take turns on an exclusive ``flock`` of
``<root>/.partial-<version>.lock``; the second finds the artifact stored and only
verifies it. ``put``'s atomic rename alone would not do: resuming needs one shared
partial directory, which two writers appending at once would corrupt.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headway.models.errors import ModelIntegrityError, ModelNotFoundError, WeightsUnavailable
from headway.models.store import ModelStore, StoredModel, file_sha256, is_version
from headway.models.weights.base import ArtifactFile, WeightsSource, check_listing

PARTIAL_PREFIX = ".partial-"


def partial_dir(store: ModelStore, version: str) -> Path:
    """Where a fetch of ``version`` keeps what it has so far (kept across runs)."""
    return store.root / f"{PARTIAL_PREFIX}{version}"


def fetch_artifact(source: WeightsSource, store: ModelStore, version: str) -> StoredModel:
    """The artifact ``version``, from ``store`` if there (verified), else from ``source``.

    ``ModelIntegrityError`` for a listing or a file that does not match (the bad file is
    deleted); ``WeightsUnavailable`` if the source cannot be read or a file ends early
    (what came is kept: run again to resume); ``ModelNotFoundError`` if the source has
    no such version."""
    if not is_version(version):
        raise ModelNotFoundError(f"not a model version: {version[:80]!r}")
    if (store.root / version).is_dir():
        return store.verify(version)
    store.root.mkdir(parents=True, exist_ok=True)
    lock = store.root / f"{PARTIAL_PREFIX}{version}.lock"
    with _exclusive(lock):
        if (store.root / version).is_dir():  # another fetcher finished while we waited
            return store.verify(version)
        origin = source.describe()
        listing = source.listing(version)
        check_listing(listing, version, origin)
        partial = partial_dir(store, version)
        partial.mkdir(exist_ok=True)
        _remove_strays(partial, {f.name for f in listing.files})
        for entry in listing.files:
            _fetch_file(source, version, entry, partial / entry.name, origin)
        stored = store.put(partial)
        if listing.signature is not None:
            store.put_signature(version, listing.signature)
        # Safe while held: a fetcher waiting on this inode, or one that makes a new lock
        # file, takes it after the artifact exists, and so only verifies it.
        lock.unlink()
    return stored


def _fetch_file(
    source: WeightsSource, version: str, entry: ArtifactFile, path: Path, origin: str
) -> None:
    size = path.stat().st_size if path.exists() else 0
    if size > entry.size:  # longer than the file can be: not a prefix of it
        path.unlink()
        size = 0
    if size < entry.size:
        with path.open("ab") as f:
            for chunk in source.read(version, entry.name, size):
                wanted = chunk[: entry.size - size]
                f.write(wanted)
                size += len(wanted)
                if size == entry.size:
                    break
        if size < entry.size:
            raise WeightsUnavailable(
                f"{entry.name} of model {version} from {origin} ended at {size} of "
                f"{entry.size} bytes; run again to resume from there"
            )
    actual = file_sha256(path)
    if actual != entry.sha256:
        path.unlink()
        raise ModelIntegrityError(
            f"{entry.name} of model {version} from {origin} has sha256 {actual}, its listing "
            f"says {entry.sha256}; the partial file was deleted"
        )


def _remove_strays(partial: Path, names: set[str]) -> None:
    for entry in partial.iterdir():
        if entry.name not in names:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
