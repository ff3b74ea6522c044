"""A content-addressed, append-only store of model artifacts.

An artifact is a directory of exactly ``model.onnx``, ``tokenizer.json`` and
``manifest.json``; its version is the SHA-256 of the canonical listing::

    for name in sorted(files):  "<name>\\0<sha256 hex of the file>\\n"

It lives at ``root/<version>/`` (files 0o444, directory 0o555) and is never overwritten:
putting identical content returns the one there. It is staged in ``root/.staging-*`` and
renamed into place, so a reader sees no artifact or a complete, read-only one. Beside it,
never inside: ``root/<version>.sha256``, its files' hashes (``sha256sum`` format, written
by ``put``; ``verify`` recomputes the version and believes the record, to name the file
that changed, only when it hashes to the version), and an optional ``root/<version>.sig``,
an ed25519 signature over the version (``models/weights/signing.py``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.models.manifest import ModelManifest
from headway.storage.durable import fsync_dir

ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
ARTIFACT_FILES = frozenset({ONNX_FILE, TOKENIZER_FILE, MANIFEST_FILE})

_VERSION = re.compile(r"[0-9a-f]{64}")
_STAGING_PREFIX = ".staging-"
_RECORD_SUFFIX = ".sha256"
_SIGNATURE_SUFFIX = ".sig"


def is_version(text: str) -> bool:
    """64 lowercase hex digits: what a version looks like (nothing else names a path)."""
    return _VERSION.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class StoredModel:
    """One immutable artifact in the store."""

    version: str
    path: Path
    manifest: ModelManifest

    @property
    def onnx_path(self) -> Path:
        return self.path / ONNX_FILE

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_FILE


def listing_version(file_hashes: Mapping[str, str]) -> str:
    """The version of an artifact whose files have these SHA-256s (the module docstring's
    formula; the one place it is written)."""
    listing = hashlib.sha256()
    for name in sorted(file_hashes):
        listing.update(f"{name}\0{file_hashes[name]}\n".encode())
    return listing.hexdigest()


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def artifact_hashes(directory: Path) -> dict[str, str]:
    """Each file of an artifact directory and its SHA-256; ``ModelIntegrityError`` unless
    it holds exactly the artifact's files."""
    names = sorted(entry.name for entry in directory.iterdir())
    if set(names) != ARTIFACT_FILES or not all((directory / n).is_file() for n in names):
        raise ModelIntegrityError(
            f"{directory} must hold exactly the files {sorted(ARTIFACT_FILES)}, found {names}"
        )
    return {name: file_sha256(directory / name) for name in names}


def artifact_version(directory: Path) -> str:
    """The content hash of an artifact directory (see the module docstring)."""
    return listing_version(artifact_hashes(directory))


class ModelStore:
    """Artifacts under ``root``, addressed by version."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def staging_dir(self) -> Path:
        """A fresh, empty directory to assemble an artifact in before ``put``."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.root))

    def put(self, staging_dir: Path) -> StoredModel:
        """Move a complete artifact into the store; the staging directory is consumed."""
        hashes = artifact_hashes(staging_dir)
        version = listing_version(hashes)
        target = self.root / version
        if target.exists():
            _remove_staging(staging_dir)
            if self.recorded_hashes(version) is None:  # stored before records were written
                self._record(version, hashes)
            return self.get(version)
        if staging_dir.parent.resolve() != self.root.resolve():
            staging_dir = self._adopt(staging_dir)
        _read_manifest(staging_dir)  # refuse to store an artifact nobody can load
        for name in ARTIFACT_FILES:
            _fsync_and_freeze(staging_dir / name)
        staging_dir.chmod(0o555)
        try:
            staging_dir.rename(target)
        except OSError:
            if not target.exists():
                raise
            _remove_staging(staging_dir)  # a concurrent put of the same content won
        self._record(version, hashes)
        fsync_dir(self.root)
        return self.get(version)

    def _adopt(self, foreign_dir: Path) -> Path:
        """Move an artifact assembled elsewhere into a staging dir beside the artifacts."""
        staging_dir = self.staging_dir()
        for name in ARTIFACT_FILES:
            shutil.move(foreign_dir / name, staging_dir / name)
        foreign_dir.rmdir()
        return staging_dir

    def get(self, version: str) -> StoredModel:
        if not is_version(version):
            raise ModelNotFoundError(f"not a model version: {version!r}")
        path = self.root / version
        if not path.is_dir():
            raise ModelNotFoundError(f"no model with version {version} in {self.root}")
        return StoredModel(version=version, path=path, manifest=_read_manifest(path))

    def list(self) -> list[StoredModel]:
        if not self.root.is_dir():
            return []
        versions = sorted(p.name for p in self.root.iterdir() if is_version(p.name))
        return [self.get(v) for v in versions]

    def verify(self, version: str) -> StoredModel:
        """Recompute the artifact's hash; ``ModelIntegrityError`` naming the file that
        changed (when the record says which) if it no longer hashes to its version."""
        model = self.get(version)
        actual = artifact_hashes(model.path)
        if listing_version(actual) != version:
            raise ModelIntegrityError(self._changed(version, actual))
        return model

    def recorded_hashes(self, version: str) -> dict[str, str] | None:
        """The per-file hashes ``put`` recorded, if present and true to the version."""
        try:
            text = (self.root / f"{version}{_RECORD_SUFFIX}").read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return None
        recorded: dict[str, str] = {}
        for line in text.splitlines():
            digest, _, name = line.partition("  ")
            recorded[name] = digest
        if set(recorded) != ARTIFACT_FILES or listing_version(recorded) != version:
            return None
        return recorded

    def signature(self, version: str) -> str | None:
        """The artifact's signature (base64), if one was written."""
        try:
            return (self.root / f"{version}{_SIGNATURE_SUFFIX}").read_text("ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            message = f"cannot read the signature of model {version}: {exc}"
            raise ModelIntegrityError(message) from exc

    def put_signature(self, version: str, signature: str) -> Path:
        """Write (or replace) the signature beside the artifact, atomically."""
        self.get(version)
        path = self.root / f"{version}{_SIGNATURE_SUFFIX}"
        _write_beside(path, signature + "\n")
        fsync_dir(self.root)
        return path

    def _record(self, version: str, hashes: Mapping[str, str]) -> None:
        text = "".join(f"{hashes[name]}  {name}\n" for name in sorted(hashes))
        _write_beside(self.root / f"{version}{_RECORD_SUFFIX}", text)

    def _changed(self, version: str, actual: dict[str, str]) -> str:
        recorded = self.recorded_hashes(version)
        if recorded is None:
            return (
                f"model {version} is refused: its files hash to {listing_version(actual)}, not "
                f"to its version (one of {', '.join(sorted(actual))} changed; no record of "
                "the stored hashes says which)"
            )
        changed = [
            f"{name} has sha256 {actual[name]}, stored as {recorded[name]}"
            for name in sorted(actual)
            if actual[name] != recorded[name]
        ]
        return f"model {version} is refused: {'; '.join(changed)}"


def _read_manifest(directory: Path) -> ModelManifest:
    try:
        text = (directory / MANIFEST_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelIntegrityError(f"cannot read {directory / MANIFEST_FILE}: {exc}") from exc
    return ModelManifest.from_json(text)


def _write_beside(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` by renaming a synced temporary file over it."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def _fsync_and_freeze(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    path.chmod(0o444)


def _remove_staging(staging_dir: Path) -> None:
    staging_dir.chmod(0o755)
    for entry in staging_dir.iterdir():
        entry.chmod(0o644)
    shutil.rmtree(staging_dir)
