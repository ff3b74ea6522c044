"""Console sessions: signed, expiring, tamper-evident, each with its own CSRF token."""

from __future__ import annotations

import itertools

import pytest

from headway.control.console.session import LOGIN_TTL_S, SessionSigner

KEY_ID = "0123456789abcdef"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counting_nonce():
    counter = itertools.count()
    return lambda n: next(counter).to_bytes(n, "big")


def signer(clock: Clock, secret: bytes = b"s" * 32, ttl_s: int = 3600) -> SessionSigner:
    return SessionSigner(secret, ttl_s, clock, counting_nonce())


def test_a_session_verifies_until_it_expires():
    clock = Clock()
    sessions = signer(clock)
    value = sessions.issue(KEY_ID)
    session = sessions.verify(value)
    assert session is not None and session.key_id == KEY_ID
    assert session.expires_at == int(clock.now) + 3600
    clock.now += 3599
    assert sessions.verify(value) is not None
    clock.now += 1
    assert sessions.verify(value) is None


def test_any_gateway_with_the_same_secret_accepts_it_and_no_other_does():
    clock = Clock()
    value = signer(clock).issue(KEY_ID)
    assert signer(clock).verify(value) is not None
    assert signer(clock, secret=b"t" * 32).verify(value) is None


@pytest.mark.parametrize("part", [0, 1, 2, 3])
def test_changing_any_part_breaks_it(part):
    clock = Clock()
    sessions = signer(clock)
    parts = sessions.issue(KEY_ID).split(".")
    original = parts[part]
    parts[part] = ("f" if original[0] != "f" else "e") + original[1:]
    assert sessions.verify(".".join(parts)) is None


@pytest.mark.parametrize(
    "value",
    ["", "x", "a.b.c", "a.b.c.d.e", "ABC.1.00.mac", f"{KEY_ID}.9{'9' * 5000}.00.mac", "é.1.00.é"],
)
def test_garbage_is_refused_not_raised(value):
    assert signer(Clock()).verify(value) is None


def test_a_later_expiry_cannot_be_written_in():
    clock = Clock()
    sessions = signer(clock)
    key_id, expires, nonce, mac = sessions.issue(KEY_ID).split(".")
    assert sessions.verify(f"{key_id}.{int(expires) + 10**6}.{nonce}.{mac}") is None


def test_each_session_has_its_own_csrf_token_and_only_it_passes():
    clock = Clock()
    sessions = signer(clock)
    first = sessions.verify(sessions.issue(KEY_ID))
    second = sessions.verify(sessions.issue(KEY_ID))
    assert first is not None and second is not None
    assert first.csrf != second.csrf
    assert sessions.csrf_ok(first, first.csrf)
    assert not sessions.csrf_ok(first, second.csrf)
    assert not sessions.csrf_ok(first, None)
    assert not sessions.csrf_ok(first, "")
    assert not sessions.csrf_ok(first, "é" * 10)  # not ASCII: refused, not a TypeError


def test_the_login_token_pairs_a_cookie_with_its_form_and_expires():
    clock = Clock()
    sessions = signer(clock)
    cookie, field = sessions.issue_login()
    other_cookie, other_field = sessions.issue_login()
    assert sessions.login_ok(cookie, field)
    assert not sessions.login_ok(cookie, other_field)
    assert not sessions.login_ok(other_cookie, field)
    assert not sessions.login_ok(None, field)
    assert not sessions.login_ok(cookie, None)
    nonce, expires, mac = cookie.split(".")
    assert not sessions.login_ok(f"{nonce}.{int(expires) + 60}.{mac}", field)
    clock.now += LOGIN_TTL_S
    assert not sessions.login_ok(cookie, field)


def test_a_value_of_one_kind_does_not_pass_for_another():
    clock = Clock()
    sessions = signer(clock)
    cookie, field = sessions.issue_login()
    session = sessions.verify(sessions.issue(KEY_ID))
    assert session is not None
    assert not sessions.csrf_ok(session, field)  # a login token is no CSRF token
    assert not sessions.login_ok(cookie, session.csrf)
    assert sessions.verify(cookie) is None


def test_an_empty_secret_or_a_key_id_that_is_not_hex_is_refused():
    with pytest.raises(ValueError, match="must not be empty"):
        SessionSigner(b"", 60)
    with pytest.raises(ValueError, match="hex"):
        signer(Clock()).issue("not.hex")
