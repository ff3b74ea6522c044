"""API keys: generated once, stored only as SHA-256 digests, matched in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "hw_"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def digests_match(presented: bytes, stored: bytes) -> bool:
    return hmac.compare_digest(presented, stored)
