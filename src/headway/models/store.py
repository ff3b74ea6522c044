"""A content-addressed, append-only store of model artifacts.

An artifact is a directory holding exactly ``model.onnx``, ``tokenizer.json``
and ``manifest.json``. Its version is the SHA-256 of the canonical listing::

    for name in sorted(files):  "<name>\\0<sha256 hex of the file>\\n"

so the version names the content and nothing else. An artifact lives at
``root/<version>/``, files mode 0o444 and directory 0o555, and is never
overwritten: putting identical content again returns the artifact already
there. Staging directories (``root/.staging-*``) sit beside the artifacts so
the final step is one atomic ``rename`` on the same filesystem: a reader sees
either no artifact or a complete, read-only one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.models.manifest import ModelManifest

ONNX_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
ARTIFACT_FILES = frozenset({ONNX_FILE, TOKENIZER_FILE, MANIFEST_FILE})

_VERSION = re.compile(r"[0-9a-f]{64}")
_STAGING_PREFIX = ".staging-"


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


def artifact_version(directory: Path) -> str:
    """The content hash of an artifact directory (see the module docstring)."""
    names = sorted(entry.name for entry in directory.iterdir())
    if set(names) != ARTIFACT_FILES or not all((directory / n).is_file() for n in names):
        raise ModelIntegrityError(
            f"{directory} must hold exactly the files {sorted(ARTIFACT_FILES)}, found {names}"
        )
    listing = hashlib.sha256()
    for name in names:
        with (directory / name).open("rb") as f:
            file_hash = hashlib.file_digest(f, "sha256").hexdigest()
        listing.update(f"{name}\0{file_hash}\n".encode())
    return listing.hexdigest()


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
        version = artifact_version(staging_dir)
        target = self.root / version
        if target.exists():
            _remove_staging(staging_dir)
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
        _fsync_dir(self.root)
        return self.get(version)

    def _adopt(self, foreign_dir: Path) -> Path:
        """Move an artifact assembled elsewhere into a staging dir beside the artifacts."""
        staging_dir = self.staging_dir()
        for name in ARTIFACT_FILES:
            shutil.move(foreign_dir / name, staging_dir / name)
        foreign_dir.rmdir()
        return staging_dir

    def get(self, version: str) -> StoredModel:
        if not _VERSION.fullmatch(version):
            raise ModelNotFoundError(f"not a model version: {version!r}")
        path = self.root / version
        if not path.is_dir():
            raise ModelNotFoundError(f"no model with version {version} in {self.root}")
        return StoredModel(version=version, path=path, manifest=_read_manifest(path))

    def list(self) -> list[StoredModel]:
        if not self.root.is_dir():
            return []
        versions = sorted(p.name for p in self.root.iterdir() if _VERSION.fullmatch(p.name))
        return [self.get(v) for v in versions]

    def verify(self, version: str) -> StoredModel:
        """Recompute the artifact's hash; raise ``ModelIntegrityError`` if it changed."""
        model = self.get(version)
        actual = artifact_version(model.path)
        if actual != version:
            raise ModelIntegrityError(f"model {version} now hashes to {actual}")
        return model


def _read_manifest(directory: Path) -> ModelManifest:
    try:
        text = (directory / MANIFEST_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelIntegrityError(f"cannot read {directory / MANIFEST_FILE}: {exc}") from exc
    return ModelManifest.from_json(text)


def _fsync_and_freeze(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    path.chmod(0o444)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_staging(staging_dir: Path) -> None:
    staging_dir.chmod(0o755)
    for entry in staging_dir.iterdir():
        entry.chmod(0o644)
    shutil.rmtree(staging_dir)
