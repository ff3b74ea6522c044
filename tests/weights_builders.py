"""Small artifacts for the weights store's tests, and sources that misbehave on purpose."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

from headway.models.manifest import ModelManifest
from headway.models.store import ModelStore, StoredModel
from headway.models.weights.base import ArtifactListing, WeightsSource

MANIFEST = ModelManifest(
    kind="embedding", name="fake", dimensions=4, max_tokens=16, quantization="none", source="test"
)


def stored_artifact(store: ModelStore, graph: bytes | None = None) -> StoredModel:
    """An artifact whose ``model.onnx`` is ``graph`` (default: 1 MiB of random bytes)."""
    staging = store.staging_dir()
    (staging / "model.onnx").write_bytes(os.urandom(1 << 20) if graph is None else graph)
    (staging / "tokenizer.json").write_text('{"fake": true}')
    (staging / "manifest.json").write_text(MANIFEST.to_json())
    return store.put(staging)


def tamper(path: Path, at: int = 0) -> None:
    """Flip one byte of a stored (read-only) file."""
    path.parent.chmod(0o755)
    path.chmod(0o644)
    with path.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


class Recording:
    """A source that passes everything on and notes each ``read`` as (name, offset)."""

    def __init__(self, inner: WeightsSource) -> None:
        self.inner = inner
        self.reads: list[tuple[str, int]] = []
        self.listings = 0

    def describe(self) -> str:
        return self.inner.describe()

    def listing(self, version: str) -> ArtifactListing:
        self.listings += 1
        return self.inner.listing(version)

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        self.reads.append((name, offset))
        return self.inner.read(version, name, offset)


class CutShort(Recording):
    """Ends every read of ``name`` after ``budget`` bytes in all, as a dropped connection
    does (the stream just stops)."""

    def __init__(self, inner: WeightsSource, name: str, budget: int) -> None:
        super().__init__(inner)
        self.name = name
        self.budget = budget

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        for chunk in super().read(version, name, offset):
            if name == self.name:
                chunk = chunk[: self.budget]
                self.budget -= len(chunk)
            if chunk:
                yield chunk
            if name == self.name and self.budget == 0:
                return


class Corrupting(Recording):
    """Flips the first byte it sends of ``name``."""

    def __init__(self, inner: WeightsSource, name: str) -> None:
        super().__init__(inner)
        self.name = name

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        first = name == self.name
        for chunk in super().read(version, name, offset):
            if first:
                chunk, first = bytes([chunk[0] ^ 0xFF]) + chunk[1:], False
            yield chunk


class Held(Recording):
    """Stops in its first read until ``release`` is set, having set ``entered``."""

    def __init__(self, inner: WeightsSource) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        self.entered.set()
        assert self.release.wait(30), "the test never released the held read"
        yield from super().read(version, name, offset)
