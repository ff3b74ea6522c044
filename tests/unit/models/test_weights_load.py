"""What a worker does before it loads a version: fetch, verify, check the signature; and
how it stops asking for a version it refused. Also the byte ranges the gateway serves."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from headway.control.weights import byte_range
from headway.errors import RangeNotSatisfiable
from headway.models.errors import ModelIntegrityError, ModelNotFoundError, ModelSignatureError
from headway.models.store import ModelStore
from headway.models.weights.directory import DirectorySource
from headway.models.weights.load import ArtifactLoader
from headway.models.weights.signing import SignaturePolicy, load_key, sign_version, write_new_key
from headway.worker.sources import LoadedModel, RefusingSource, Wanted
from tests.fakes import RecordingBackend
from tests.weights_builders import Recording, stored_artifact, tamper


@pytest.fixture
def origin(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "origin")


def test_a_missing_version_is_fetched_and_a_present_one_verified(origin, tmp_path) -> None:
    model = stored_artifact(origin, graph=b"graph")
    local = ModelStore(tmp_path / "local")
    source = Recording(DirectorySource(origin.root))
    loader = ArtifactLoader(local, source)
    assert loader.load(model.version).version == model.version
    assert source.listings == 1
    assert loader.load(model.version).version == model.version
    assert source.listings == 1  # present: verified, not fetched again
    tamper(local.get(model.version).onnx_path)
    with pytest.raises(ModelIntegrityError, match=r"model\.onnx has sha256"):
        loader.load(model.version)
    with pytest.raises(ModelNotFoundError):
        ArtifactLoader(ModelStore(tmp_path / "empty")).load(model.version)


def test_the_fetched_signature_is_held_to_the_policy(origin, tmp_path) -> None:
    model = stored_artifact(origin, graph=b"graph")
    public = write_new_key(tmp_path / "key.pem")
    origin.put_signature(model.version, sign_version(load_key(tmp_path / "key.pem"), model.version))
    source = DirectorySource(origin.root)
    trusting = SignaturePolicy((public,), required=True)
    assert ArtifactLoader(ModelStore(tmp_path / "a"), source, trusting).load(model.version)
    other = write_new_key(tmp_path / "other.pem")
    with pytest.raises(ModelSignatureError, match="none of the 1 keys"):
        ArtifactLoader(ModelStore(tmp_path / "b"), source, SignaturePolicy((other,))).load(
            model.version
        )
    unsigned = stored_artifact(origin, graph=b"another graph")
    with pytest.raises(ModelSignatureError, match="unsigned"):
        ArtifactLoader(ModelStore(tmp_path / "c"), source, trusting).load(unsigned.version)


class Inner:
    """A registry source of two versions, the second of which is refused at load."""

    def __init__(self, refused: str) -> None:
        self.refused = refused
        self.loads: list[str] = []

    def changes(self) -> int:
        return 7

    def wanted(self) -> Wanted:
        return Wanted(7, ("good", self.refused))

    def load(self, version: str) -> LoadedModel:
        self.loads.append(version)
        if version == self.refused:
            raise ModelIntegrityError(f"model {version} is refused: model.onnx has sha256 x")
        return LoadedModel(RecordingBackend(), version)


def test_a_refused_version_is_logged_once_and_no_longer_wanted(caplog) -> None:
    inner = Inner("bad")
    source = RefusingSource(inner)
    assert source.wanted().versions == ("good", "bad")
    assert source.load("good").version == "good"
    with caplog.at_level(logging.ERROR), pytest.raises(ModelIntegrityError, match=r"model\.onnx"):
        source.load("bad")
    assert source.wanted() == Wanted(7, ("good",))
    with caplog.at_level(logging.ERROR), pytest.raises(ModelIntegrityError, match=r"model\.onnx"):
        source.load("bad")  # from memory: not hashed again
    assert inner.loads == ["good", "bad"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "model version bad refused" in errors[0].getMessage()


def test_with_every_version_refused_the_wanted_stay_as_they_are() -> None:
    class OnlyBad(Inner):
        def wanted(self) -> Wanted:
            return Wanted(3, ("bad",))

    source = RefusingSource(OnlyBad("bad"))
    with pytest.raises(ModelIntegrityError):
        source.load("bad")
    assert source.wanted() == Wanted(3, ("bad",))  # the worker keeps what it holds


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-", (0, 100)),
        ("bytes=40-", (40, 100)),
        ("bytes=99-", (99, 100)),
        ("bytes=10-19", (10, 20)),
        ("bytes=10-500", (10, 100)),
        ("bytes=-30", (70, 100)),
        ("bytes=-300", (0, 100)),
    ],
)
def test_a_byte_range_is_read_as_rfc_9110_says(header, expected) -> None:
    assert byte_range(header, 100) == expected


@pytest.mark.parametrize(
    "header",
    ["bytes=100-", "bytes=500-", "bytes=20-10", "bytes=-0", "bytes=0-1,5-6", "items=0-", "bytes=-"],
)
def test_a_range_past_the_end_or_of_another_form_is_416(header) -> None:
    with pytest.raises(RangeNotSatisfiable) as refused:
        byte_range(header, 100)
    assert refused.value.headers == {"content-range": "bytes */100"}
    assert refused.value.status == 416
