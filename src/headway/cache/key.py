"""Cache keys: 32-byte digests that name a model's answer to a text, never the text.

A key is ``sha256(namespace + sha256(text))``. The namespace is itself a digest of
everything besides the text that decides the answer: the model version, the
processing settings (pooling, normalisation, truncation), the output dimensions,
the kind of answer (``embed`` rows or ``score`` pairs) and the scope (a tenant's, or
its shared group's: ``scopes.py``). Change any of them and every key changes, so a new
version or setting never reads an old answer, and no scope reads another's.

Unambiguous by construction: the namespace hashes a JSON array (strings escaped,
``null`` apart from every number), and what follows it in a key is a fixed number
of 32-byte digests, so no two different inputs are the same bytes before hashing.
Texts are encoded as UTF-8 with lone surrogates passed through (JSON may carry
them), so every ``str`` has a digest and distinct strings have distinct ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

Kind = Literal["embed", "score"]

KINDS: frozenset[str] = frozenset({"embed", "score"})

_FORMAT = "headway.cache/1"
"""Bumped if the encoding below ever changes, which moves every key."""


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def namespace(
    version: str, processing: str, dimensions: int | None, kind: Kind, scope: str
) -> bytes:
    """The digest every key of one (version, settings, dimensions, kind, scope) starts from."""
    if kind not in KINDS:
        raise ValueError(f"cache kind must be 'embed' or 'score', not {kind!r}")
    if dimensions is not None and (isinstance(dimensions, bool) or dimensions <= 0):
        raise ValueError(f"cache dimensions must be a positive int or None, not {dimensions!r}")
    fields = [_FORMAT, version, processing, dimensions, kind, scope]
    canonical = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).digest()


def text_key(ns: bytes, text: str) -> bytes:
    """The key of one text's row (an embedding) under namespace ``ns``."""
    return hashlib.sha256(ns + text_digest(text)).digest()


def pair_key(ns: bytes, query: str, document: str) -> bytes:
    """The key of one (query, document) score; the order of the two matters."""
    return hashlib.sha256(ns + text_digest(query) + text_digest(document)).digest()
