"""ed25519 signatures over model versions, and the policy a loader holds them to.

A version is the SHA-256 of an artifact's content, so a signature over the version
string (its 64 ASCII hex digits) vouches for the content. ``headway models sign``
writes it to ``<model_root>/<version>.sig`` (base64 of the 64-byte signature), beside
the artifact, never inside (its three files and its hash stay); a fetch copies it with
the files. ``headway models keygen`` writes the private key as unencrypted PKCS#8 PEM,
mode 0600, and prints the public key as base64 of its raw 32 bytes: the form
``weights.trusted_keys`` takes.

At load, ``SignaturePolicy.check``: with no trusted keys, signatures are not looked at
(``require_signature`` without keys is refused when the settings are read); with some,
a present signature must verify against one of them, and with ``require_signature`` an
unsigned artifact is refused too.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from headway.models.errors import ModelSignatureError, SigningKeyInvalid
from headway.models.store import ModelStore
from headway.settings import WeightsSettings


def write_new_key(path: Path) -> str:
    """A fresh private key at ``path`` (which must not exist), mode 0600; its public key."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise SigningKeyInvalid(f"cannot create {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return public_key_of(key)


def load_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise SigningKeyInvalid(f"cannot read {path}: {exc.strerror}") from exc
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningKeyInvalid(f"{path} is not an unencrypted PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyInvalid(f"{path} holds a {type(key).__name__}, not an ed25519 key")
    return key


def public_key_of(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def sign_version(key: Ed25519PrivateKey, version: str) -> str:
    return base64.b64encode(key.sign(version.encode("ascii"))).decode("ascii")


def signed_by(public_key: str, version: str, signature: str) -> bool:
    """Whether ``signature`` (base64) is ``public_key``'s (base64, raw) over ``version``."""
    try:
        raw_signature = base64.b64decode(signature, validate=True)
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key, validate=True))
        key.verify(raw_signature, version.encode("ascii"))
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


@dataclass(frozen=True, slots=True)
class SignaturePolicy:
    trusted_keys: tuple[str, ...] = ()
    required: bool = False

    @classmethod
    def from_settings(cls, weights: WeightsSettings) -> SignaturePolicy:
        return cls(weights.trusted_keys, weights.require_signature)

    def check(self, version: str, signature: str | None) -> str | None:
        """The trusted key that signed ``version``; None when signatures are not checked
        (no trusted keys). ``ModelSignatureError`` for a bad signature, and for none where
        one is required."""
        if signature is None:
            if self.required:
                raise ModelSignatureError(
                    f"model {version} is refused: it is unsigned and weights.require_signature "
                    f"is on (sign it: headway models sign {version} --key FILE)"
                )
            return None
        if not self.trusted_keys:
            return None
        for key in self.trusted_keys:
            if signed_by(key, version, signature):
                return key
        raise ModelSignatureError(
            f"model {version} is refused: its signature verifies against none of the "
            f"{len(self.trusted_keys)} keys in weights.trusted_keys"
        )


def sign_artifact(store: ModelStore, version: str, key: Ed25519PrivateKey) -> Path:
    """Sign a stored artifact (verified first: a signature vouches for what it names) and
    write the signature beside it; the path written."""
    store.verify(version)
    return store.put_signature(version, sign_version(key, version))
