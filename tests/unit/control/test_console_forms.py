"""What the console reads from a browser, or from anyone posing as one (``gateway/console``):
cookies, the session and sign-in tokens in them, the origin headers, form bodies. Any of
them, however malformed, reads as a value or as nothing (no session, not same-origin), or
(a form of too many fields) a client error, never another exception."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.control.console.auth import (
    FORM,
    MAX_FORM_FIELDS,
    cookies,
    csrf_of,
    form_of,
    same_origin,
)
from headway.control.console.session import SessionSigner
from headway.errors import HeadwayError
from headway.http.asgi import Message, Request
from tests import hostile

SIGNER = SessionSigner(b"s" * 32, 3600, lambda: 1_800_000_000.0)
pieces = st.one_of(st.text("0123456789abcdef", max_size=40), hostile.header_values)
tokens = st.lists(pieces, max_size=6).map(".".join)


async def _nothing() -> Message:
    raise AssertionError("the body is given")


def request(headers: dict[str, str], body: bytes = b"") -> Request:
    scope = {"type": "http", "method": "POST", "path": "/console/login", "headers": []}
    return Request(scope, headers, _nothing, body)


@settings(hostile.FIXED, max_examples=50)
@given(tokens, tokens, st.one_of(st.none(), hostile.header_values))
def test_any_session_or_sign_in_token_verifies_or_is_none(
    session: str, login: str, field: str | None
) -> None:
    assert SIGNER.verify(session) is None  # none of these did this signer sign
    assert SIGNER.login_ok(login, field) is False


headers = st.fixed_dictionaries(
    {},
    optional={
        "cookie": st.lists(st.tuples(hostile.header_values, tokens), max_size=4).map(
            lambda pairs: "; ".join(f"{name}={value}" for name, value in pairs)
        ),
        "origin": st.one_of(hostile.header_values, st.just("http://[::1")),
        "host": hostile.header_values,
        "sec-fetch-site": hostile.header_values,
        "x-csrf-token": hostile.header_values,
    },
)


@settings(hostile.FIXED, max_examples=50)
@given(headers)
def test_any_headers_read_as_cookies_an_origin_and_a_token(given_headers: dict[str, str]) -> None:
    asked = request(given_headers)
    assert isinstance(cookies(asked), dict)
    assert isinstance(same_origin(asked), bool)
    assert csrf_of(asked) == given_headers.get("x-csrf-token")


def form_body(fields: list[tuple[str, str]]) -> bytes:
    return "&".join(f"{quote(name)}={quote(value)}" for name, value in fields).encode()


fields = st.tuples(st.sampled_from(["key", "csrf"]) | hostile.texts, hostile.client_values)


@settings(hostile.FIXED, max_examples=50)
@given(st.lists(fields, max_size=20), st.binary(max_size=40))
def test_a_form_of_up_to_twenty_fields_reads_as_its_fields(
    pairs: list[tuple[str, str]], junk: bytes
) -> None:
    for body in (form_body(pairs), junk):
        assert isinstance(form_of(request({"content-type": FORM}, body)), dict)


@settings(hostile.FIXED)
@given(hostile.some_of(fields))
def test_any_form_reads_as_its_fields_or_is_a_client_error(pairs: list[tuple[str, str]]) -> None:
    form = request({"content-type": FORM}, form_body(pairs))
    if len(pairs) <= MAX_FORM_FIELDS:
        assert isinstance(form_of(form), dict)
        return
    with pytest.raises(HeadwayError) as refused:
        form_of(form)
    assert refused.value.status == 400
