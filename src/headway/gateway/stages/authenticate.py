"""Bearer-key authentication against the registry snapshot: whose key a digest is.

Keys are never stored, only their SHA-256 digests. The presented key is
hashed and looked up by digest, then the stored digest is checked against the
computed one with ``hmac.compare_digest``. Timing of the lookup can reveal at
most something about the digest of the attacker's own guess, which says
nothing usable about any stored key. A key being rotated out carries its expiry and
is refused from then on, whenever the snapshot was loaded.

The edge runs it before the body is read, through the failed-key limiter
(``gateway/auth/checks.py``); the request path finds the ``Caller`` it made there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from headway.errors import Forbidden, Unauthorized
from headway.http.asgi import Request
from headway.registry.keys import digests_match, key_digest
from headway.registry.model import Principal, Snapshot, Tenant


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a model request is served for: the tenant, and the key its usage names."""

    tenant: Tenant
    key_id: str
    retried: bool = False
    """The request id is the caller's own and comes again on a retry (a batch line's): an
    event of work we gave back must not take it, or the retry that serves would find
    its id billed already (``stages/meter.py``)."""


def authenticate(headers: Mapping[str, str], snapshot: Snapshot) -> Principal:
    """The principal of the request's bearer key (no limiter: for tools and tests)."""
    header = headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    return principal_of(key_digest(key), snapshot, time.time())


def principal_of(digest: bytes, snapshot: Snapshot, now: float) -> Principal:
    """Whose key has this digest, at wall-clock ``now``; ``Unauthorized`` for none."""
    principal = snapshot.principals.get(digest)
    if principal is None or not digests_match(principal.key_digest, digest):
        raise Unauthorized("invalid API key")
    if principal.expires_at is not None and principal.expires_at <= now:
        raise Unauthorized("this API key has expired (it was rotated); use the new key")
    return principal


def require_tenant(principal: Principal) -> Tenant:
    if principal.tenant is None:
        raise Forbidden("an admin key cannot call tenant endpoints; use a tenant's key")
    return principal.tenant


def require_admin(principal: Principal) -> None:
    if principal.role != "admin":
        raise Forbidden("an admin key is required")


def caller_of(request: Request) -> Caller:
    """The caller the edge found for a route declared ``tenant_key`` or ``executor_token``."""
    caller = request.caller
    if not isinstance(caller, Caller):
        raise TypeError(f"route {request.route!r} declares no tenant check")
    return caller


def key_principal(request: Request) -> Principal:
    """The principal the edge found for a route declared ``admin_key`` or ``any_key``."""
    principal = request.caller
    if not isinstance(principal, Principal):
        raise TypeError(f"route {request.route!r} declares no key check")
    return principal
