"""The real transport: HTTP/1.1 keep-alive connections to every replica, on asyncio protocols.

A call writes its request in one ``write`` on an idle connection to its replica (or a new one),
which parses the response in place as the bytes arrive (``transport.connection``, the parser the
load generator drives too): no streams, no timer object but one ``call_later``, cheaper than
aiohttp's and httpx's clients (docs/DESIGN.md, "Decisions").

A connection carries one call at a time. A call that times out or whose caller is cancelled (a
hedge's loser, a client that left) aborts its connection: the late response could not be told
apart from the next call's. An idle connection is dropped past ``keepalive_s``, which is below
the workers' own idle timeout so that one is rarely reused just as the server closes it.

An https:// replica is called with ``tls``'s latest context (mutual TLS: the internal CA) and
``server_hostname`` as the name its certificate must carry, whatever address it was found at;
without ``tls``, the system's default verification of the URL's host. A new context (a
certificate rotated on disk) is used by new connections; idle ones made with the old are closed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from headway.tls.reload import ContextSource
from headway.transport.base import (
    ConnectFailed,
    Reply,
    TransportError,
    TransportTimeout,
    UpstreamRequest,
)
from headway.transport.connection import Connection, Failure, Pending, Response, Result

KEEPALIVE_S = 30.0


class _Origin:
    """Connections to one replica (scheme, host, port): the idle ones, and how to open more.
    The ``Owner`` of its connections: they come back here when a call is done."""

    __slots__ = ("_idle", "_keepalive_s", "_loop", "_tls", "clock", "host", "name", "port")

    def __init__(
        self,
        base_url: str,
        tls: Callable[[], ssl.SSLContext | None],
        server_hostname: str | None,
        keepalive_s: float,
        clock: Callable[[], float],
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"not an http(s) replica URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.name = server_hostname or self.host
        self._tls = tls if parts.scheme == "https" else _plain
        self._keepalive_s = keepalive_s
        self.clock = clock
        self._idle: list[tuple[Connection, float, ssl.SSLContext | None]] = []
        self._loop = asyncio.get_running_loop()

    async def connection(self, timeout_s: float) -> Connection:
        """An idle connection still fit for use, or a new one within ``timeout_s``."""
        context = self._tls()
        now = self.clock()
        idle = self._idle
        while idle:
            connection, since, made_with = idle.pop()
            if connection.usable and made_with is context and now - since < self._keepalive_s:
                return connection
            connection.abort()
        try:
            async with asyncio.timeout(timeout_s):
                _, connection = await self._loop.create_connection(
                    lambda: _Pooled(self, context),
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=self.name if context is not None else None,
                )
        except TimeoutError:
            raise  # the caller's deadline, not the replica: an OSError too, so caught first
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{self.host}:{self.port}: {type(exc).__name__}: {exc}") from exc
        return connection

    def release(self, connection: Connection) -> None:
        assert isinstance(connection, _Pooled)
        self._idle.append((connection, self.clock(), connection.context))

    def lost(self, connection: Connection) -> None:
        """A closed connection is skipped (not ``usable``) when next popped from ``_idle``."""

    def close(self) -> None:
        for connection, _, _ in self._idle:
            connection.abort()
        self._idle.clear()


class _Pooled(Connection):
    """A connection that remembers the TLS context it was made with."""

    __slots__ = ("context",)

    def __init__(self, owner: _Origin, context: ssl.SSLContext | None) -> None:
        super().__init__(owner)
        self.context = context


def _plain() -> None:
    return None


class Http1Transport:
    """``Transport`` over keep-alive HTTP/1.1 connections (see the module docstring)."""

    def __init__(
        self,
        tls: ContextSource | None = None,
        server_hostname: str | None = None,
        *,
        keepalive_s: float = KEEPALIVE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tls = tls
        self._server_hostname = server_hostname
        self._keepalive_s = keepalive_s
        self._clock = clock
        self._origins: dict[str, _Origin] = {}
        self._default_context: ssl.SSLContext | None = None

    async def send(self, request: UpstreamRequest) -> Reply:
        origin = self._origins.get(request.base_url)
        if origin is None:
            origin = self._origins[request.base_url] = self._origin(request.base_url)
        started = self._clock()
        try:
            connection = await origin.connection(request.timeout_s)
        except TimeoutError as exc:
            raise TransportTimeout(f"{_what(request)} timed out connecting") from exc
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        pending = Pending(_encode(request, origin), _settler(future), 0)
        left_s = request.timeout_s - (self._clock() - started)
        timer = loop.call_later(max(0.0, left_s), _time_out, pending, connection)
        connection.send(pending)
        try:
            result = await future
        except asyncio.CancelledError:
            if not pending.done:
                pending.done = True  # nobody will read the response: drop the connection
                connection.abort()
            raise
        finally:
            timer.cancel()
        if isinstance(result, Failure):
            if result.reason == "timeout":
                raise TransportTimeout(f"{_what(request)} timed out")
            raise TransportError(f"{_what(request)}: {result.detail}")
        return Reply(result.status, result.body, _headers(result))

    async def close(self) -> None:
        for origin in self._origins.values():
            origin.close()
        self._origins.clear()
        await asyncio.sleep(0)  # let the transports close

    def _origin(self, base_url: str) -> _Origin:
        if self._tls is not None:
            return _Origin(
                base_url, self._tls.current, self._server_hostname, self._keepalive_s, self._clock
            )
        return _Origin(base_url, self._system_context, None, self._keepalive_s, self._clock)

    def _system_context(self) -> ssl.SSLContext:
        if self._default_context is None:
            self._default_context = ssl.create_default_context()
        return self._default_context


def _encode(request: UpstreamRequest, origin: _Origin) -> bytes:
    head = (
        f"{request.method} {request.path} HTTP/1.1\r\nhost: {origin.host}:{origin.port}\r\n"
        f"content-length: {len(request.body)}\r\n"
    )
    if request.content_type:
        head += f"content-type: {request.content_type}\r\n"
    if request.traceparent is not None:
        head += f"traceparent: {request.traceparent}\r\n"
    return (head + "\r\n").encode("latin-1") + request.body


def _what(request: UpstreamRequest) -> str:
    """The call, for an error's message (built only when there is one)."""
    return f"{request.method} {request.url}"


def _settler(future: asyncio.Future[Result]) -> Callable[[int, Result], None]:
    def settle(_token: int, result: Result) -> None:
        if not future.done():
            future.set_result(result)

    return settle


def _time_out(pending: Pending, connection: Connection) -> None:
    if not pending.done:
        pending.finish(Failure("timeout", "no response in time"))
        connection.abort()


def _headers(response: Response) -> dict[str, str]:
    """The response's headers, names in lower case (the last of a repeated name wins)."""
    headers: dict[str, str] = {}
    for line in response.head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers
