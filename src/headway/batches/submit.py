"""How an executor sends one line to a gateway: the internal line routes, over HTTP.

The line goes to ``/internal/batches/v1/…`` of the next gateway in turn, with the
executor's token, the tenant it runs for (by id; the name too, for logs and for gateways
of the previous version), the batch's key and the line's own request id
(``gateway/lines/headers.py``). The answer comes back whole (status, the headers
the executor acts on, body); a gateway it cannot reach is an ``Answer`` with status 0,
never an exception, so the executor decides every outcome in one place.
"""

from __future__ import annotations

import itertools
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from headway.batches.model import Batch, line_request_id
from headway.tls.reload import ContextSource

UNREACHABLE = 0
"""``Answer.status`` when no gateway answered (refused, reset, timed out)."""

ROUTE_OF = {
    "/v1/embeddings": "/internal/batches/v1/embeddings",
    "/v1/rerank": "/internal/batches/v1/rerank",
}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    request_id: str
    retry_after_s: float | None = None

    @property
    def error_type(self) -> str | None:
        """The ``error.type`` of an error answer (``{"error": {"type", "message"}}``)."""
        if self.status < 400:
            return None
        try:
            error = json.loads(self.body).get("error")
        except (ValueError, AttributeError):
            return None
        kind = error.get("type") if isinstance(error, dict) else None
        return kind if isinstance(kind, str) else None


class Submitter(Protocol):
    async def submit(self, batch: Batch, line: int, body: bytes) -> Answer: ...

    async def close(self) -> None: ...


class HttpSubmitter:
    def __init__(
        self,
        gateway_urls: Sequence[str],
        token: str,
        timeout_ms: int,
        tls: ContextSource | None = None,
    ) -> None:
        """``tls``: the trust for https:// gateways (``tls.hops.gateway_client``); None:
        aiohttp's own (the system's roots)."""
        if not gateway_urls:
            raise ValueError("the executor needs at least one gateway URL")
        self._urls = itertools.cycle([url.rstrip("/") for url in gateway_urls])
        self._token = token
        self._timeout_ms = timeout_ms
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    async def submit(self, batch: Batch, line: int, body: bytes) -> Answer:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_ms / 1000 + 5.0)
            )
        headers = line_headers(batch, line, self._token, self._timeout_ms)
        request_id = headers["x-headway-request-id"]
        url = next(self._urls) + ROUTE_OF[batch.endpoint]
        context: ssl.SSLContext | bool = True  # aiohttp's own verification
        if self._tls is not None and url.startswith("https:"):
            context = self._tls.current()  # the latest: a rotated certificate, new connections
        try:
            async with self._session.post(url, data=body, headers=headers, ssl=context) as response:
                data = await response.read()
                return Answer(
                    response.status,
                    data,
                    response.headers.get("x-request-id", request_id),
                    retry_after_s(response.headers.get("retry-after")),
                )
        except (aiohttp.ClientError, TimeoutError, OSError):
            return Answer(UNREACHABLE, b"", request_id)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def line_headers(batch: Batch, line: int, token: str, timeout_ms: int) -> dict[str, str]:
    """A line's request: on the batch's tenant and key, with the line's own request id, in
    the trace of the request that created the batch."""
    headers = {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "x-timeout-ms": str(timeout_ms),
        "x-headway-tenant-id": str(batch.tenant_id),
        "x-headway-tenant": batch.tenant,
        "x-headway-key-id": batch.key_id,
        "x-headway-request-id": line_request_id(batch.id, line),
        # The claim the gateway checks against its batch store (gateway/lines/claims.py).
        "x-headway-batch-id": batch.id,
        "x-headway-line": str(line),
    }
    if batch.traceparent:
        headers["traceparent"] = batch.traceparent
    return headers


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` of seconds (what the gateway sends); None if absent or not that."""
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None
