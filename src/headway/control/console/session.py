"""Console sessions and CSRF tokens: signed values, no server-side table (pure).

A session is ``<key id>.<expires>.<nonce>.<mac>``: the admin key's id (never the key), the unix
second it ends, 128 random bits, and ``HMAC-SHA256(secret, "session" | key id | expires |
nonce)`` in URL-safe base64. Any gateway given the same secret accepts the others' sessions,
and none keeps a list. The MAC is compared in constant time; an expired value is refused even
with a good one. A signature proves only that this secret issued the value: whether its key is
still a live admin key is the caller's check (``auth.py``), on every request.

A session's CSRF token is ``HMAC-SHA256(secret, "csrf" | nonce)``: derived, so nothing is
stored, and different for every session. A cross-site form can make the browser send the
cookie, never read the page, so it cannot know the token. Signing in has its own token (login
CSRF: a site that signs a victim in to the attacker's session): a short-lived signed login
value ``<nonce>.<expires>.<mac>`` in a cookie and ``HMAC(secret, "login" | nonce)`` in the
form, both needed by ``POST``. Every MAC names its purpose, so no value of one kind passes for
another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

NONCE_BYTES = 16
LOGIN_TTL_S = 600
"""How long a sign-in form stays good."""


@dataclass(frozen=True, slots=True)
class Session:
    """A verified session: whose it is, when it ends, and its CSRF token."""

    key_id: str
    expires_at: int
    csrf: str


def new_secret() -> bytes:
    """A random per-process secret: sessions end when the process does."""
    return os.urandom(32)


class SessionSigner:
    def __init__(
        self,
        secret: bytes,
        ttl_s: int,
        clock: Callable[[], float] = time.time,
        nonce: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if not secret:
            raise ValueError("a session secret must not be empty")
        self._secret = secret
        self.ttl_s = ttl_s
        self._clock = clock
        self._nonce = nonce

    def issue(self, key_id: str) -> str:
        """A new session for ``key_id`` (hex), good for ``ttl_s`` from now."""
        if not _is_hex(key_id):
            raise ValueError("a key id is hex")
        expires = int(self._clock()) + self.ttl_s
        nonce = self._nonce(NONCE_BYTES).hex()
        payload = f"{key_id}.{expires}.{nonce}"
        return f"{payload}.{self._mac('session', payload)}"

    def verify(self, value: str) -> Session | None:
        """The session ``value`` is, if this secret signed it and it has not expired."""
        parts = value.split(".")
        if len(parts) != 4:
            return None
        key_id, expires, nonce, mac = parts
        if not (_is_hex(key_id) and _is_hex(nonce) and _is_time(expires)):
            return None
        if not _same(mac, self._mac("session", f"{key_id}.{expires}.{nonce}")):
            return None
        if int(expires) <= self._clock():
            return None
        return Session(key_id, int(expires), self._mac("csrf", nonce))

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and _same(given, session.csrf)

    def issue_login(self) -> tuple[str, str]:
        """A sign-in form's pair: the value for its cookie, the token for its field."""
        expires = int(self._clock()) + LOGIN_TTL_S
        nonce = self._nonce(NONCE_BYTES).hex()
        payload = f"{nonce}.{expires}"
        return f"{payload}.{self._mac('login-cookie', payload)}", self._mac("login", nonce)

    def login_ok(self, cookie: str | None, field: str | None) -> bool:
        """The form's token matches the cookie's, which this secret signed, not expired."""
        if cookie is None or field is None:
            return False
        parts = cookie.split(".")
        if len(parts) != 3:
            return False
        nonce, expires, mac = parts
        if not (_is_hex(nonce) and _is_time(expires)):
            return False
        signed = _same(mac, self._mac("login-cookie", f"{nonce}.{expires}"))
        fresh = int(expires) > self._clock()
        return signed and fresh and _same(field, self._mac("login", nonce))

    def _mac(self, purpose: str, payload: str) -> str:
        digest = hmac.new(self._secret, f"{purpose}\0{payload}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def _same(given: str, expected: str) -> bool:
    """Constant-time equality (``compare_digest`` takes only ASCII strings)."""
    return given.isascii() and hmac.compare_digest(given, expected)


def _is_time(value: str) -> bool:
    """Unix seconds: digits, few enough to be a time (and to be cheap to convert)."""
    return 0 < len(value) <= 12 and value.isascii() and value.isdigit()


def _is_hex(value: str) -> bool:
    return bool(value) and value.isascii() and all(c in "0123456789abcdef" for c in value)
