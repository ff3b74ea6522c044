"""The real transport: aiohttp's client, keep-alive connections to every replica.

aiohttp's client costs ~0.2 ms CPU per call here; httpx's costs 2-3 ms and is not
an option on the request path.
"""

from __future__ import annotations

import asyncio

import aiohttp

from headway.transport.base import (
    ConnectFailed,
    Reply,
    TransportError,
    TransportTimeout,
    UpstreamRequest,
)


class AiohttpTransport:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def send(self, request: UpstreamRequest) -> Reply:
        headers = {"content-type": request.content_type} if request.content_type else {}
        if request.traceparent is not None:
            headers["traceparent"] = request.traceparent
        what = f"{request.method} {request.url}"
        try:
            async with self._client().request(
                request.method,
                request.url,
                data=request.body or None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=request.timeout_s),
            ) as response:
                payload = await response.read()
                return Reply(
                    response.status, payload, {k.lower(): v for k, v in response.headers.items()}
                )
        except TimeoutError as exc:
            raise TransportTimeout(f"{what} timed out") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(f"{what}: {type(exc).__name__}") from exc
        except aiohttp.ClientError as exc:
            raise TransportError(f"{what}: {type(exc).__name__}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let aiohttp close its transports
