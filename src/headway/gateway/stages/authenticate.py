"""Bearer-key authentication against the registry snapshot.

Keys are never stored, only their SHA-256 digests. The presented key is
hashed and looked up by digest, then the stored digest is checked against the
computed one with ``hmac.compare_digest``. Timing of the lookup can reveal at
most something about the digest of the attacker's own guess, which says
nothing usable about any stored key. A key being rotated out carries its expiry and
is refused from then on, whenever the snapshot was loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
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


Identify = Callable[[Request, Snapshot], Caller]
"""How a route finds its caller: a tenant's bearer key (``by_key``), or the batch
executor acting for a tenant (``gateway/batches/lines.py``)."""


def by_key(request: Request, snapshot: Snapshot) -> Caller:
    principal = authenticate(request.headers, snapshot)
    return Caller(require_tenant(principal), principal.key_id)


def authenticate(headers: Mapping[str, str], snapshot: Snapshot) -> Principal:
    header = headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    digest = key_digest(key)
    principal = snapshot.principals.get(digest)
    if principal is None or not digests_match(principal.key_digest, digest):
        raise Unauthorized("invalid API key")
    if principal.expires_at is not None and principal.expires_at <= time.time():
        raise Unauthorized("this API key has expired (it was rotated); use the new key")
    return principal


def require_tenant(principal: Principal) -> Tenant:
    if principal.tenant is None:
        raise Forbidden("an admin key cannot call tenant endpoints; use a tenant's key")
    return principal.tenant


def require_admin(principal: Principal) -> None:
    if principal.role != "admin":
        raise Forbidden("an admin key is required")
