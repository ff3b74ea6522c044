"""Cache keys: one per (namespace, text), every namespace component counted, no text kept."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import pytest

from headway.cache.key import namespace, pair_key, text_digest, text_key

BASE: dict[str, Any] = {
    "version": "a" * 64,
    "processing": "pooling=mean;normalize=1;max_tokens=256",
    "dimensions": 384,
    "kind": "embed",
    "scope": "_",
}
VARIANTS: dict[str, list[Any]] = {
    "version": ["b" * 64, "a" * 63],
    "processing": ["pooling=cls;normalize=1;max_tokens=256", ""],
    "dimensions": [None, 383, 1],
    "kind": ["score"],
    "scope": ["acme", "_ ", ""],
}


def test_text_digest_is_sha256_of_utf8() -> None:
    assert text_digest("héllo") == hashlib.sha256("héllo".encode()).digest()


def test_every_namespace_component_changes_the_namespace() -> None:
    namespaces = [namespace(**BASE)]
    for field, values in VARIANTS.items():
        namespaces += [namespace(**{**BASE, field: value}) for value in values]
    assert len(set(namespaces)) == len(namespaces)
    assert all(len(ns) == 32 for ns in namespaces)
    assert namespace(**BASE) == namespace(**dict(BASE))  # deterministic
    assert namespace(*BASE.values()) == namespace(**BASE)  # positional, in that order


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"version": "ab", "processing": "c"}, {"version": "a", "processing": "bc"}),
        ({"version": 'a","b', "processing": ""}, {"version": "a", "processing": "b"}),
        ({"processing": "x", "scope": "y"}, {"processing": "x,y", "scope": ""}),
    ],
)
def test_namespace_fields_do_not_run_into_each_other(
    left: dict[str, Any], right: dict[str, Any]
) -> None:
    assert namespace(**{**BASE, **left}) != namespace(**{**BASE, **right})


def test_namespace_refuses_unknown_kinds_and_bad_dimensions() -> None:
    with pytest.raises(ValueError, match="kind"):
        namespace(**{**BASE, "kind": "embedding"})
    for dimensions in (0, -1, True):
        with pytest.raises(ValueError, match="dimensions"):
            namespace(**{**BASE, "dimensions": dimensions})


def test_text_keys_differ_by_text_and_namespace() -> None:
    ns, other = namespace(**BASE), namespace(**{**BASE, "scope": "acme"})
    texts = ["", "a", "b", "a ", "A", "\ud800", "日本語"]  # a lone surrogate has a key too
    keys = [text_key(n, t) for n, t in itertools.product((ns, other), texts)]
    assert len(set(keys)) == len(keys)
    assert text_key(ns, "a") == text_key(ns, "a")
    assert text_key(ns, "a") == hashlib.sha256(ns + text_digest("a")).digest()


def test_pair_keys_depend_on_order_and_differ_from_text_keys() -> None:
    ns = namespace(**{**BASE, "kind": "score", "dimensions": None})
    assert pair_key(ns, "q", "d") != pair_key(ns, "d", "q")
    assert pair_key(ns, "ab", "c") != pair_key(ns, "a", "bc")
    assert pair_key(ns, "q", "d") != text_key(ns, "qd")
    expected = hashlib.sha256(ns + text_digest("q") + text_digest("d")).digest()
    assert pair_key(ns, "q", "d") == expected


def test_no_text_in_the_key() -> None:
    ns = namespace(**BASE)
    text = "the quarterly numbers of ACME Corp, confidential"
    for key in (text_key(ns, text), pair_key(ns, text, text)):
        assert len(key) == 32
        assert text.encode() not in key
        assert all(word.encode() not in key for word in text.split() if len(word) > 3)
