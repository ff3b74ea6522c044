"""The weights store: listings, the directory source, fetching (resumable, verified)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from headway.models.errors import ModelIntegrityError, ModelNotFoundError, WeightsUnavailable
from headway.models.store import ModelStore, artifact_version
from headway.models.weights.base import ArtifactFile, ArtifactListing, check_listing
from headway.models.weights.directory import DirectorySource, store_listing
from headway.models.weights.fetch import fetch_artifact, partial_dir
from tests.weights_builders import Corrupting, CutShort, Held, Recording, stored_artifact, tamper


@pytest.fixture
def origin(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "origin")


@pytest.fixture
def local(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "local")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_listing_hashes_to_its_version_by_the_stores_own_formula(origin: ModelStore) -> None:
    model = stored_artifact(origin)
    listing = store_listing(origin, model.version)
    assert listing.version == model.version
    assert [f.name for f in listing.files] == ["manifest.json", "model.onnx", "tokenizer.json"]
    for entry in listing.files:
        data = (model.path / entry.name).read_bytes()
        assert (entry.size, entry.sha256) == (len(data), sha256(data))
    formula = hashlib.sha256(
        b"".join(f"{f.name}\0{f.sha256}\n".encode() for f in listing.files)
    ).hexdigest()
    assert formula == model.version == artifact_version(model.path)
    check_listing(listing, model.version, "test")  # passes
    assert listing.signature is None


def test_without_the_record_the_listing_is_hashed_again(origin: ModelStore) -> None:
    model = stored_artifact(origin)
    recorded = store_listing(origin, model.version)
    (origin.root / f"{model.version}.sha256").unlink()
    assert store_listing(origin, model.version) == recorded
    tamper(model.onnx_path)
    with pytest.raises(ModelIntegrityError, match=r"one of .* changed"):
        store_listing(origin, model.version)


def forged(listing: ArtifactListing, **changes: object) -> ArtifactListing:
    first = listing.files[0]
    files = [ArtifactFile(**{"name": first.name, "size": first.size, "sha256": first.sha256}
                          | changes), *listing.files[1:]]  # fmt: skip
    return ArtifactListing(listing.version, files, listing.signature)


@pytest.mark.parametrize(
    "changes",
    [{"sha256": "0" * 64}, {"name": "notes.txt"}, {"sha256": "not-hex"}, {"size": -1}],
)
def test_a_listing_that_does_not_make_the_version_is_refused(
    origin: ModelStore, changes: dict[str, object]
) -> None:
    model = stored_artifact(origin)
    listing = forged(store_listing(origin, model.version), **changes)
    with pytest.raises(ModelIntegrityError, match=f"listing of model {model.version}"):
        check_listing(listing, model.version, "test")


def test_the_directory_source_reads_from_an_offset_to_the_end(origin: ModelStore) -> None:
    model = stored_artifact(origin)
    source = DirectorySource(origin.root, chunk_bytes=1000)
    whole = model.onnx_path.read_bytes()
    chunks = list(source.read(model.version, "model.onnx", 12_345))
    assert b"".join(chunks) == whole[12_345:]
    assert max(len(c) for c in chunks) == 1000
    with pytest.raises(ModelNotFoundError):
        list(source.read(model.version, "../registry.sqlite3", 0))
    with pytest.raises(ModelNotFoundError):
        source.listing("0" * 64)


def test_fetch_copies_the_artifact_and_its_signature(origin: ModelStore, local: ModelStore):
    model = stored_artifact(origin)
    origin.put_signature(model.version, "c2lnbmF0dXJl")
    fetched = fetch_artifact(DirectorySource(origin.root), local, model.version)
    assert fetched.version == model.version
    assert local.verify(model.version) == fetched
    for name in ("model.onnx", "tokenizer.json", "manifest.json"):
        assert (fetched.path / name).read_bytes() == (model.path / name).read_bytes()
    assert local.signature(model.version) == "c2lnbmF0dXJl"
    assert not partial_dir(local, model.version).exists()
    assert sorted(p.name for p in local.root.iterdir()) == sorted(
        [model.version, f"{model.version}.sha256", f"{model.version}.sig"]
    )


def test_a_fetch_cut_short_resumes_from_where_it_stopped(origin: ModelStore, local: ModelStore):
    model = stored_artifact(origin)
    cut = CutShort(DirectorySource(origin.root, chunk_bytes=64 << 10), "model.onnx", 300_000)
    with pytest.raises(WeightsUnavailable, match="ended at 300000 of 1048576 bytes"):
        fetch_artifact(cut, local, model.version)
    partial = partial_dir(local, model.version) / "model.onnx"
    assert partial.stat().st_size == 300_000
    with pytest.raises(ModelNotFoundError):
        local.get(model.version)

    again = Recording(DirectorySource(origin.root))
    fetched = fetch_artifact(again, local, model.version)
    assert ("model.onnx", 300_000) in again.reads  # only the rest was asked for
    assert ("model.onnx", 0) not in again.reads
    assert fetched.onnx_path.read_bytes() == model.onnx_path.read_bytes()
    assert local.verify(model.version) == fetched


def test_a_changed_byte_is_refused_naming_the_file_and_both_hashes(
    origin: ModelStore, local: ModelStore
) -> None:
    model = stored_artifact(origin)
    expected = sha256(model.onnx_path.read_bytes())
    source = Corrupting(DirectorySource(origin.root), "model.onnx")
    with pytest.raises(ModelIntegrityError) as refused:
        fetch_artifact(source, local, model.version)
    message = str(refused.value)
    assert "model.onnx" in message and expected in message
    corrupted = bytearray(model.onnx_path.read_bytes())
    corrupted[0] ^= 0xFF
    assert sha256(bytes(corrupted)) in message
    assert not (partial_dir(local, model.version) / "model.onnx").exists()  # deleted
    with pytest.raises(ModelNotFoundError):
        local.get(model.version)
    # The next run starts that file over and succeeds.
    assert fetch_artifact(DirectorySource(origin.root), local, model.version).version


def test_a_partial_file_longer_than_the_listing_starts_over(origin: ModelStore, local):
    model = stored_artifact(origin, graph=b"graph")
    partial = partial_dir(local, model.version)
    partial.mkdir(parents=True)
    (partial / "model.onnx").write_bytes(b"something longer than the graph")
    (partial / "stray.bin").write_bytes(b"left by someone")
    source = Recording(DirectorySource(origin.root))
    assert fetch_artifact(source, local, model.version).onnx_path.read_bytes() == b"graph"
    assert ("model.onnx", 0) in source.reads


def test_a_stored_version_is_verified_not_fetched(origin: ModelStore, local: ModelStore):
    model = stored_artifact(origin)
    fetch_artifact(DirectorySource(origin.root), local, model.version)
    source = Recording(DirectorySource(origin.root))
    assert fetch_artifact(source, local, model.version).version == model.version
    assert (source.listings, source.reads) == (0, [])
    tamper(local.get(model.version).tokenizer_path)
    with pytest.raises(ModelIntegrityError, match=r"tokenizer\.json has sha256"):
        fetch_artifact(source, local, model.version)


def test_a_version_the_source_lacks_is_not_found(origin: ModelStore, local: ModelStore):
    stored_artifact(origin)
    with pytest.raises(ModelNotFoundError):
        fetch_artifact(DirectorySource(origin.root), local, "ab" * 32)
    with pytest.raises(ModelNotFoundError, match="not a model version"):
        fetch_artifact(DirectorySource(origin.root), local, "../x")


def blocked_on(lock: Path) -> bool:
    """Whether some process waits for an flock on ``lock`` (``/proc/locks`` lists waiters
    with ``->``)."""
    inode = os.stat(lock).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and line.split()[-3].endswith(f":{inode}") for line in lines)


def test_a_second_fetcher_waits_for_the_first_then_only_verifies(
    origin: ModelStore, local: ModelStore
) -> None:
    model = stored_artifact(origin)
    first = Held(DirectorySource(origin.root))
    second = Recording(DirectorySource(origin.root))
    results: dict[str, str] = {}

    def fetch(name: str, source: Recording) -> None:
        results[name] = fetch_artifact(source, local, model.version).version

    threads = [threading.Thread(target=fetch, args=("first", first))]
    threads[0].start()
    assert first.entered.wait(10)
    lock = local.root / f".partial-{model.version}.lock"
    threads.append(threading.Thread(target=fetch, args=("second", second)))
    threads[1].start()
    deadline = time.monotonic() + 10
    while not blocked_on(lock):  # the second waits on the lock the first holds
        assert time.monotonic() < deadline, "the second fetcher never waited on the lock"
        time.sleep(0.005)  # poll interval of the condition above
    first.release.set()
    for thread in threads:
        thread.join(30)
    assert results == {"first": model.version, "second": model.version}
    assert (second.listings, second.reads) == (0, [])  # it found the artifact stored
    assert local.verify(model.version).version == model.version
    assert not lock.exists()
