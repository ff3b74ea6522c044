"""ed25519 signatures over versions: keys, signing, the load-time policy, the settings."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from headway.models.errors import ModelIntegrityError, ModelSignatureError, SigningKeyInvalid
from headway.models.store import ModelStore
from headway.models.weights.signing import (
    SignaturePolicy,
    load_key,
    sign_artifact,
    sign_version,
    signed_by,
    write_new_key,
)
from headway.settings import WeightsSettings
from tests.weights_builders import stored_artifact, tamper

VERSION = "ab" * 32


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    public = write_new_key(tmp_path / "key.pem")
    assert stat.S_IMODE((tmp_path / "key.pem").stat().st_mode) == 0o600
    key = load_key(tmp_path / "key.pem")
    assert signed_by(public, VERSION, sign_version(key, VERSION))
    with pytest.raises(SigningKeyInvalid, match="cannot create"):
        write_new_key(tmp_path / "key.pem")  # never over an existing key


def test_a_file_that_is_no_ed25519_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(SigningKeyInvalid, match="not an unencrypted PEM private key"):
        load_key(tmp_path / "junk.pem")
    with pytest.raises(SigningKeyInvalid, match="cannot read"):
        load_key(tmp_path / "missing.pem")


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, str, str]:
    """A signing key's path, its public key, and another public key."""
    public = write_new_key(tmp_path / "signer.pem")
    other = write_new_key(tmp_path / "other.pem")
    return tmp_path / "signer.pem", public, other


def test_a_signature_verifies_against_its_key_only(keys: tuple[Path, str, str]) -> None:
    path, public, other = keys
    signature = sign_version(load_key(path), VERSION)
    assert SignaturePolicy((other, public)).check(VERSION, signature) == public
    with pytest.raises(ModelSignatureError, match="none of the 1 keys"):
        SignaturePolicy((other,)).check(VERSION, signature)
    with pytest.raises(ModelSignatureError):  # signs that version, not another
        SignaturePolicy((public,)).check("cd" * 32, signature)
    with pytest.raises(ModelSignatureError):
        SignaturePolicy((public,)).check(VERSION, "bm90IGEgc2lnbmF0dXJl")
    with pytest.raises(ModelSignatureError):
        SignaturePolicy((public,)).check(VERSION, "%%% not base64")


def test_unsigned_is_refused_only_where_a_signature_is_required(keys) -> None:
    _, public, _ = keys
    assert SignaturePolicy((public,)).check(VERSION, None) is None
    assert SignaturePolicy().check(VERSION, "anything") is None  # no keys: not checked
    with pytest.raises(ModelSignatureError, match=r"unsigned and weights\.require_signature"):
        SignaturePolicy((public,), required=True).check(VERSION, None)


def test_signing_an_artifact_writes_beside_it_after_verifying(tmp_path: Path, keys) -> None:
    path, public, _ = keys
    store = ModelStore(tmp_path / "store")
    model = stored_artifact(store, graph=b"graph")
    written = sign_artifact(store, model.version, load_key(path))
    assert written == store.root / f"{model.version}.sig"
    assert sorted(p.name for p in model.path.iterdir()) == [
        "manifest.json", "model.onnx", "tokenizer.json"
    ]  # fmt: skip
    assert store.verify(model.version) == model  # its hash is untouched
    assert SignaturePolicy((public,), required=True).check(
        model.version, store.signature(model.version)
    )
    tamper(model.onnx_path)
    with pytest.raises(ModelIntegrityError):
        sign_artifact(store, model.version, load_key(path))


def test_settings_take_raw_32_byte_keys_and_need_one_to_require_signatures(keys) -> None:
    _, public, _ = keys
    assert WeightsSettings(trusted_keys=(public,), require_signature=True).require_signature
    with pytest.raises(ValidationError, match="raw 32-byte ed25519 key"):
        WeightsSettings(trusted_keys=("c2hvcnQ=",))
    with pytest.raises(ValidationError, match="require_signature needs trusted_keys"):
        WeightsSettings(require_signature=True)
    with pytest.raises(ValidationError, match="http:// or https://"):
        WeightsSettings(url="gateway:8080")
