"""How each route identifies its caller, from the headers alone, before its body is read.

A route declares its check by name (``Route.auth``); the edge runs it before reading a byte of
the body and hands the answer to the handler as ``request.caller``, so no handler checks a key
again and a stranger's upload is refused after its headers. ``tenant_key`` takes a tenant's key
(a ``Caller``), ``any_key`` any valid key and ``admin_key`` an admin's (a ``Principal``);
``executor_token`` takes ``batches.executor_token``, over the executor's client certificate
where TLS asks for one, only for a line of a live batch of the tenant its headers name
(``gateway/lines/``), at tier batch. The control plane adds ``weights_token`` (the worker
credential or an admin key: ``token_or_admin``) and ``console_session`` (a session cookie: no
key, so not limited).

Every key and token goes through the one limiter (``limiter.py``): a refused address or prefix
gets 429 before its key is looked at; a key that matches nothing is a failure (401) counted
against both; a valid key on the wrong route (403) is no guess and counts nothing, nor does a
missing key (401).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import TypeVar

from headway.errors import Forbidden, LineNotLive, Unauthorized
from headway.gateway.auth.kinds import (
    ADMIN_KEY,
    ANY_KEY,
    EXECUTOR_TOKEN,
    TENANT_KEY,
)
from headway.gateway.auth.limiter import FailedAuthLimiter
from headway.gateway.lines.claims import LiveBatches
from headway.gateway.lines.headers import line_caller, line_claim
from headway.gateway.snapshots import Snapshots
from headway.gateway.stages.authenticate import Caller, principal_of, require_admin, require_tenant
from headway.http.asgi import Request
from headway.http.client_address import NO_PROXIES, TrustedProxies, request_client
from headway.http.router import Check
from headway.registry.keys import key_digest
from headway.registry.model import Principal
from headway.tls.identity import PEER_EXTENSION, accepted

T = TypeVar("T")

MISSING = "missing API key: send `Authorization: Bearer <key>`"


def bearer(request: Request) -> str:
    """The request's bearer credential; ``Unauthorized`` without one."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        raise Unauthorized(MISSING)
    return presented


class KeyChecks:
    """The checks of keys and tokens, each through ``limiter``."""

    def __init__(
        self,
        snapshots: Snapshots,
        limiter: FailedAuthLimiter,
        *,
        trusted: TrustedProxies = NO_PROXIES,
        executor_token: str = "",
        live_batches: LiveBatches | None = None,
        line_callers: frozenset[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``trusted``: the proxies whose X-Forwarded-For names the client;
        ``live_batches``: what the executor's token may run (None: no line at all);
        ``line_callers``: the identities the connection's client certificate must name on
        a line route (``tls.line_callers``; None: no certificate asked for);
        ``clock``: wall seconds (key expiry)."""
        self._snapshots = snapshots
        self.limiter = limiter
        self.trusted = trusted
        self._executor_token = executor_token.encode()
        self._live_batches = live_batches
        self._line_callers = line_callers
        self._clock = clock

    def table(self) -> dict[str, Check]:
        """Every check by the name routes declare."""
        return {
            TENANT_KEY: self.tenant_key,
            ANY_KEY: self.any_key,
            ADMIN_KEY: self.admin_key,
            EXECUTOR_TOKEN: self.executor_token,
        }

    def client_of(self, request: Request) -> str:
        return request_client(request.scope, request.headers, self.trusted)

    async def tenant_key(self, request: Request) -> Caller:
        principal = await self.principal(request, bearer(request))
        tenant = require_tenant(principal)
        request.tenant = tenant.name
        return Caller(tenant, principal.key_id)

    async def any_key(self, request: Request) -> Principal:
        principal = await self.principal(request, bearer(request))
        if principal.tenant is not None:
            request.tenant = principal.tenant.name
        return principal

    async def admin_key(self, request: Request) -> Principal:
        principal = await self.principal(request, bearer(request))
        require_admin(principal)
        return principal

    async def executor_token(self, request: Request) -> Caller:
        if not self._executor_token:
            raise Forbidden("batch line routes are off: this gateway has no executor token")

        def evaluate(presented: str, digest: bytes) -> None:
            if not hmac.compare_digest(presented.encode(), self._executor_token):
                raise Unauthorized("these routes take the batch executor's token")

        await self._checked(request, bearer(request), evaluate)
        if self._line_callers is not None:
            names = request.scope.get("extensions", {}).get(PEER_EXTENSION, frozenset())
            if not accepted(names, self._line_callers):
                raise Forbidden(
                    "batch line routes take the executor's client certificate"
                    f" (one naming {', '.join(sorted(self._line_callers))})"
                )
        caller = line_caller(request, self._snapshots.current)
        claim = line_claim(request, caller)
        if self._live_batches is None:
            raise Forbidden("batch line routes are off: this gateway has no batch store")
        refusal = await self._live_batches.refusal(claim)
        if refusal is not None:
            raise LineNotLive(f"the executor's token runs only lines of live batches: {refusal}")
        request.tenant = caller.tenant.name
        return caller

    async def token_or_admin(self, request: Request, token: bytes) -> Principal | None:
        """None for ``token`` (compared in constant time; empty: none is good), else the
        admin key's principal."""
        snapshot = self._snapshots.current

        def evaluate(presented: str, digest: bytes) -> Principal | None:
            if token and hmac.compare_digest(presented.encode(), token):
                return None
            return principal_of(digest, snapshot, self._clock())

        principal = await self._checked(request, bearer(request), evaluate)
        if principal is not None:
            require_admin(principal)
        return principal

    async def principal(self, request: Request, presented: str) -> Principal:
        """Whose key ``presented`` is (the console's sign-in form checks its key here too)."""
        snapshot = self._snapshots.current
        return await self._checked(
            request, presented, lambda _, digest: principal_of(digest, snapshot, self._clock())
        )

    async def _checked(
        self, request: Request, presented: str, evaluate: Callable[[str, bytes], T]
    ) -> T:
        """``evaluate`` the credential if the limiter lets it be checked; an ``Unauthorized``
        it raises is counted as a failure."""
        digest = key_digest(presented)
        limiter, address = self.limiter, self.client_of(request)
        if limiter.known(address, digest):  # served from here before: not held up
            try:
                return evaluate(presented, digest)
            except Unauthorized:  # revoked or expired since
                await limiter.failed(limiter.attempt(address, presented, digest))
                raise
        attempt = limiter.attempt(address, presented, digest)
        await limiter.admit(attempt)
        try:
            found = evaluate(presented, digest)
        except Unauthorized:
            await limiter.failed(attempt)
            raise
        limiter.succeeded(attempt)
        return found
