"""The content-addressed store, on small fake artifacts (no ONNX needed)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.models.manifest import ModelManifest
from headway.models.store import ModelStore, artifact_version

MANIFEST = ModelManifest(
    kind="embedding", name="fake", dimensions=4, max_tokens=16, quantization="none", source="test"
)


def make_artifact(directory: Path, graph: bytes = b"graph-bytes") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(graph)
    (directory / "tokenizer.json").write_text('{"fake": true}')
    (directory / "manifest.json").write_text(MANIFEST.to_json())
    return directory


def expected_version(directory: Path) -> str:
    listing = b"".join(
        f"{name}\0{hashlib.sha256((directory / name).read_bytes()).hexdigest()}\n".encode()
        for name in sorted(["manifest.json", "model.onnx", "tokenizer.json"])
    )
    return hashlib.sha256(listing).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "store")


def test_version_is_the_hash_of_the_canonical_listing(store: ModelStore, tmp_path: Path) -> None:
    staging = make_artifact(tmp_path / "a")
    version = expected_version(staging)
    stored = store.put(staging)
    assert stored.version == version
    assert stored.path == store.root / version
    assert stored.manifest == MANIFEST
    assert stored.onnx_path.read_bytes() == b"graph-bytes"
    assert not staging.exists()  # the staging directory was moved, not copied


def test_artifact_is_read_only(store: ModelStore, tmp_path: Path) -> None:
    stored = store.put(make_artifact(tmp_path / "a"))
    assert stat.S_IMODE(stored.path.stat().st_mode) == 0o555
    for name in ("model.onnx", "tokenizer.json", "manifest.json"):
        assert stat.S_IMODE((stored.path / name).stat().st_mode) == 0o444


def test_same_content_is_the_same_version_and_never_overwritten(
    store: ModelStore, tmp_path: Path
) -> None:
    first = store.put(make_artifact(tmp_path / "a"))
    before = os.stat(first.onnx_path)
    second = store.put(make_artifact(tmp_path / "b"))
    assert second == first
    after = os.stat(first.onnx_path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [m.version for m in store.list()] == [first.version]
    assert not (tmp_path / "b").exists()


def test_different_content_is_a_different_version(store: ModelStore, tmp_path: Path) -> None:
    a = store.put(make_artifact(tmp_path / "a", b"one"))
    b = store.put(make_artifact(tmp_path / "b", b"two"))
    assert a.version != b.version
    assert {m.version for m in store.list()} == {a.version, b.version}


def test_put_from_the_stores_own_staging_dir_leaves_nothing_behind(store: ModelStore) -> None:
    stored = store.put(make_artifact(store.staging_dir()))
    beside = [stored.version, f"{stored.version}.sha256"]  # the artifact and its record
    assert sorted(p.name for p in store.root.iterdir()) == beside
    again = store.put(make_artifact(store.staging_dir()))
    assert again == stored
    assert sorted(p.name for p in store.root.iterdir()) == beside


def test_staging_dirs_are_not_listed(store: ModelStore, tmp_path: Path) -> None:
    store.put(make_artifact(tmp_path / "a"))
    leftover = store.staging_dir()
    assert leftover.parent == store.root
    assert len(store.list()) == 1


def test_verify_detects_tampering(store: ModelStore, tmp_path: Path) -> None:
    stored = store.put(make_artifact(tmp_path / "a"))
    assert store.verify(stored.version) == stored
    stored.onnx_path.chmod(0o644)
    stored.onnx_path.write_bytes(b"graph-bytez")
    with pytest.raises(ModelIntegrityError):
        store.verify(stored.version)


def test_verify_detects_an_extra_file(store: ModelStore, tmp_path: Path) -> None:
    stored = store.put(make_artifact(tmp_path / "a"))
    stored.path.chmod(0o755)
    (stored.path / "extra.bin").write_bytes(b"")
    with pytest.raises(ModelIntegrityError):
        store.verify(stored.version)


@pytest.mark.parametrize("version", ["0" * 64, "f" * 64, "../etc", "", "A" * 64])
def test_get_unknown_version(store: ModelStore, tmp_path: Path, version: str) -> None:
    store.put(make_artifact(tmp_path / "a"))
    with pytest.raises(ModelNotFoundError):
        store.get(version)


def test_list_of_an_empty_store(store: ModelStore) -> None:
    assert store.list() == []


@pytest.mark.parametrize("problem", ["missing", "extra", "bad-manifest"])
def test_put_refuses_a_malformed_artifact(store: ModelStore, tmp_path: Path, problem: str) -> None:
    staging = make_artifact(tmp_path / "a")
    if problem == "missing":
        (staging / "tokenizer.json").unlink()
    elif problem == "extra":
        (staging / "notes.txt").write_text("x")
    else:
        (staging / "manifest.json").write_text('{"kind": "embedding"}')
    with pytest.raises(ModelIntegrityError):
        store.put(staging)
    assert store.list() == []


def test_artifact_version_ignores_where_the_directory_is(tmp_path: Path) -> None:
    a = artifact_version(make_artifact(tmp_path / "x" / "a"))
    b = artifact_version(make_artifact(tmp_path / "y" / "b"))
    assert a == b
