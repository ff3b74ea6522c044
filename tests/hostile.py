"""What a hostile client sends, as hypothesis strategies, and the invariant every reader of
client input keeps: any input gives a value or a ``HeadwayError`` with a 4xx status, never
another exception (which the edge answers 500).

The strategies lean toward the relatives of what broke parsers before, without naming
those cases: whole numbers of any length (``int`` refuses more than 4,300 digits), digits of
other scripts (``str.isdigit`` takes ``²``, ``٣`` and ``１``), signs, blanks, separators and
exponents around digits, control characters (NUL, which Postgres cannot store), and JSON
nested to any depth (the decoder's stack gives out near a thousand).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from hypothesis import settings
from hypothesis import strategies as st

from headway.errors import HeadwayError

T = TypeVar("T")

FIXED = settings(derandomize=True, database=None, deadline=None)
"""For the property tests of client input: the same examples every run (a failure is a bug
found, never a flake)."""

OTHER_DIGITS = st.characters(categories=["Nd", "No", "Nl"], exclude_characters="0123456789")
"""Digits and numerals of every script but ASCII's: ``٣``, ``²``, ``１``, ``Ⅻ``."""
AROUND_DIGITS = st.sampled_from(["-", "+", " ", "\t", "_", ".", "e", "E", "x", ",", "\x00"])


@st.composite
def long_digits(draw: st.DrawFn) -> str:
    """ASCII digits, a few or thousands (``int`` takes at most 4,300), perhaps after zeros."""
    length = draw(st.one_of(st.integers(1, 30), st.integers(4_280, 6_000)))
    digit = draw(st.sampled_from("0123456789"))
    zeros = "0" * draw(st.sampled_from([0, 0, 1, 5_000]))
    return zeros + digit * length


def weighted(*choices: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """One of ``choices``, each as likely as the others (a choice given twice, twice as)."""
    return st.sampled_from(choices).flatmap(lambda choice: choice)


_SHORT_NUMBERS = st.integers(min_value=-(10**30), max_value=10**30).map(str)
_SCRIPT_DIGITS = st.lists(
    st.one_of(st.sampled_from("0123456789"), OTHER_DIGITS), min_size=1, max_size=8
).map("".join)
_AROUND = st.tuples(
    st.text("0123456789", max_size=6), AROUND_DIGITS, st.text("0123456789", max_size=6)
).map("".join)
_TEXT = st.text(max_size=80)
_CONTROL = st.text(st.characters(max_codepoint=0x1F), max_size=8)

numbers = weighted(long_digits(), _SHORT_NUMBERS, _SCRIPT_DIGITS, _AROUND)
"""Whatever a client may write where a whole number is asked for."""

texts = weighted(_TEXT, _CONTROL, st.just(""))
"""Any text: control characters, other scripts, nothing at all."""

client_values = weighted(
    long_digits(), long_digits(), _SHORT_NUMBERS, _SCRIPT_DIGITS, _AROUND, _TEXT, _CONTROL
)
"""A query or form value, a path segment, an id: numbers of any length half the time."""

LATIN1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF)
header_numbers = weighted(
    long_digits(),
    _SHORT_NUMBERS,
    st.lists(st.sampled_from("0123456789²³¹¼½¾ -+_.,"), min_size=1, max_size=8).map("".join),
)
"""``numbers`` as a header can carry them (Latin-1: its only other digits are ``²³¹¼½¾``)."""
header_values = weighted(header_numbers, header_numbers, st.text(LATIN1, max_size=80))
"""A header's value as a server passes it on: Latin-1, no control characters."""


@st.composite
def nested_json(draw: st.DrawFn) -> bytes:
    """A JSON value of arrays and objects within one another, any depth up to 6,000."""
    depth = draw(st.one_of(st.integers(0, 80), st.integers(900, 1_100), st.integers(0, 6_000)))
    kind = draw(st.sampled_from(["array", "object", "mixed"]))
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b'[{"a":' * (depth // 2) + b"null" + b"}]" * (depth // 2)


@st.composite
def json_bodies(draw: st.DrawFn, fields: tuple[str, ...] = ()) -> bytes:
    """A body holding a nested value somewhere: alone, or a few objects (keyed by one of
    ``fields`` or an unknown key) and arrays down."""
    body = draw(nested_json())
    keys = st.sampled_from([*fields, "x"])
    for step in draw(st.lists(st.one_of(keys, st.none()), max_size=4)):
        body = b"[%s]" % body if step is None else b'{"%s": %s}' % (step.encode(), body)
    return body


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
_LITERALS = st.sampled_from(["1e400", "-1e400", "1E-400", "-0", "1.0", "1" + "0" * 5_000])
"""Numbers JSON can write that Python's json cannot: past a float, thousands of digits."""


@st.composite
def json_documents(draw: st.DrawFn, fields: tuple[str, ...]) -> bytes:
    """A JSON object of ``fields`` (and unknown keys) holding any JSON at all: wrong types,
    huge or fractional numbers, nested values, a field written as a number past a float."""
    keys = st.sampled_from(fields) | texts
    values = st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )
    document = json.dumps(draw(st.dictionaries(keys, values, max_size=6))).encode()
    if draw(st.booleans()):
        literal = draw(_LITERALS).encode()
        key = json.dumps(draw(keys)).encode()
        document = b"{%s: %s, " % (key, literal) + document[1:]
        document = document.replace(b", }", b"}")
    return document


def some_of(items: st.SearchStrategy[T], most: int = 60) -> st.SearchStrategy[list[T]]:
    """A few ``items``, or many: lists as long as ``most`` are drawn as often as short ones."""
    count = st.one_of(st.integers(0, 4), st.integers(most // 4, most))
    return count.flatmap(lambda n: st.lists(items, min_size=n, max_size=n))


def value_or_client_error(read: Callable[[], T]) -> T | HeadwayError:
    """What ``read`` gives, or the ``HeadwayError`` it raised, which must be a client's
    (4xx); any other exception goes on, failing the test."""
    try:
        return read()
    except HeadwayError as exc:
        error = exc
    assert 400 <= error.status < 500, f"{type(error).__name__} ({error.status}): {error.message}"
    return error


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@st.composite
def jsonl_lines(draw: st.DrawFn) -> bytes:
    """One line of a batch input: a request whose fields are hostile, a nested value where
    its body or a field's value goes, or bytes that are no JSON at all."""
    body = draw(st.one_of(st.just(b'{"model": "synthetic", "input": "a"}'), json_bodies()))
    url = draw(st.sampled_from(["/v1/embeddings", "/v1/rerank", "/v2/embed", ""]) | texts)
    line = b'{"custom_id": %s, "method": "POST", "url": %s, "body": %s}' % (
        draw(st.one_of(st.just(b'"a"'), st.just(b"1"), nested_json())),
        _utf8(_json_string(url)),
        body,
    )
    return draw(st.one_of(st.just(line), nested_json(), st.binary(max_size=60)))


def _json_string(text: str) -> str:
    return json.dumps(text)


_PARAMETER = st.one_of(
    st.text(max_size=20).map(lambda t: '"' + t.replace('"', "").replace("\\", "") + '"'),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20),
    st.text(max_size=20).map(lambda t: "UTF-8''" + "".join(f"%{b:02x}" for b in _utf8(t))),
)
"""A header parameter's value: quoted, a token, RFC 5987 (each perhaps malformed)."""
_FILENAME = weighted(
    st.just('filename="in.jsonl"'),
    st.just('filename="in.jsonl"'),
    st.just('filename="in.jsonl"'),
    st.tuples(st.sampled_from(["filename=", "filename*="]), _PARAMETER).map("".join),
)
_BOUNDARY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-'()+_,./:=?"


@st.composite
def multipart_forms(draw: st.DrawFn) -> tuple[str, bytes]:
    """An upload's content type and body: its fields (purpose, expires_after[…], file, and
    perhaps one it does not take), most well formed around hostile values (a number of any
    length or script, a filename, JSONL lines nested or broken), some not (a boundary that
    is no boundary, a header past repair, a body cut short or with bare LFs)."""
    good_boundary = st.text(_BOUNDARY_CHARS, min_size=8, max_size=70)
    boundary = draw(weighted(good_boundary, good_boundary, good_boundary, st.text(max_size=80)))
    batch = st.just("batch")
    values = {
        "purpose": weighted(batch, batch, batch, client_values),
        "expires_after[seconds]": weighted(st.just("3600"), numbers),
        "expires_after[anchor]": weighted(st.just("created_at"), client_values),
        "x": client_values,
    }
    taken = st.sampled_from(["expires_after[seconds]", "expires_after[anchor]"])
    names = ["purpose", *draw(st.lists(taken | st.just("x"), unique=True, max_size=2)), "file"]
    names = draw(weighted(st.just(names), st.just(names), st.permutations(names)))
    delimiter = b"--" + _utf8(boundary)
    body = b""
    for name in names:
        disposition = f'form-data; name="{name}"'
        if name == "file":
            disposition += "; " + draw(_FILENAME)
            data = b"\n".join(draw(st.lists(jsonl_lines(), min_size=1, max_size=4)))
        else:
            data = _utf8(draw(values[name]))
        if draw(st.sampled_from([False] * 19 + [True])):  # a header past repair
            disposition = draw(st.text(max_size=30))
        headers = _utf8(f"Content-Disposition: {disposition}")
        body += delimiter + b"\r\n" + headers + b"\r\n\r\n" + data + b"\r\n"
    body += delimiter + b"--\r\n"
    damage = draw(st.sampled_from(["none"] * 8 + ["cut", "bare-lf"]))
    if damage == "cut":
        body = body[: draw(st.integers(0, len(body)))]
    elif damage == "bare-lf":
        body = body.replace(b"\r\n", b"\n", draw(st.integers(1, 3)))
    return f'multipart/form-data; boundary="{boundary}"', body
