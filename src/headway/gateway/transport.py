"""The seam between the gateway and its replicas: one small protocol.

``AiohttpTransport`` is the real one (aiohttp's client costs ~0.2 ms CPU per
call here; httpx's costs 2-3 ms and is not an option on the request path).
``headway.http.inprocess.AsgiTransport`` is the fake: it calls worker apps in
the same process, without sockets.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import aiohttp


class TransportError(Exception):
    """The replica could not be reached, or the connection broke mid-call."""


class ConnectFailed(TransportError):
    """No connection could be made: the replica is down or gone."""


class TransportTimeout(TransportError):
    """The call did not finish within its timeout."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]


class Transport(Protocol):
    async def post(
        self, base_url: str, path: str, body: bytes, content_type: str, timeout_s: float
    ) -> Reply: ...

    async def get(self, base_url: str, path: str, timeout_s: float) -> Reply: ...

    async def close(self) -> None: ...


class AiohttpTransport:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def post(
        self, base_url: str, path: str, body: bytes, content_type: str, timeout_s: float
    ) -> Reply:
        return await self._request("POST", base_url + path, body, content_type, timeout_s)

    async def get(self, base_url: str, path: str, timeout_s: float) -> Reply:
        return await self._request("GET", base_url + path, None, None, timeout_s)

    async def _request(
        self, method: str, url: str, body: bytes | None, content_type: str | None, timeout_s: float
    ) -> Reply:
        headers = {"content-type": content_type} if content_type else None
        try:
            async with self._client().request(
                method,
                url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                payload = await response.read()
                return Reply(
                    response.status, payload, {k.lower(): v for k, v in response.headers.items()}
                )
        except TimeoutError as exc:
            raise TransportTimeout(f"{method} {url} timed out") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(f"{method} {url}: {type(exc).__name__}") from exc
        except aiohttp.ClientError as exc:
            raise TransportError(f"{method} {url}: {type(exc).__name__}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let aiohttp close its transports
