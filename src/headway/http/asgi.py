"""A minimal ASGI toolkit: request, response, lifespan, disconnects.

The gateway's CPU per request matters more than convenience, so headway speaks
raw ASGI (about 4x cheaper than a full framework here) with exactly what it
needs. ``App`` turns ASGI events into one ``Request`` and hands it to a single
handler — in practice an ``Edge`` (``http/edge.py``), the outermost layer, which
routes, reads the body, and turns every outcome into a counted ``Response``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs

import msgspec

from headway.errors import HeadwayError, PayloadTooLarge, error_body
from headway.http.numbers import decimal

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Hook = Callable[[], Awaitable[None]]

_json = msgspec.json.Encoder()
NO_PARAMS: Mapping[str, str] = MappingProxyType({})
"""The path parameters of an exact route (one shared empty mapping: nothing to allocate)."""


class ClientDisconnected(Exception):
    """The client closed the connection before the response was sent."""


def new_request_id() -> str:
    """128 random bits in hex: always ours, never the client's (it keys billing dedupe)."""
    return os.urandom(16).hex()


@dataclass(slots=True)
class Request:
    scope: Scope
    headers: dict[str, str]
    receive: Receive
    body: bytes = b""
    id: str = field(default_factory=new_request_id)
    tenant: str = ""
    """Who sent it, once authenticated: for the log line of a failure."""
    route: str = ""
    """The name of the route it matched, once the edge has matched it."""
    response_headers: dict[str, str] = field(default_factory=dict)
    """Sent with the answer whatever it is (the rate-limit headers, say)."""
    path_params: Mapping[str, str] = field(default_factory=lambda: NO_PARAMS)
    """The values of the route template's ``{name}`` segments, set by the router."""
    caller: object = None
    """Who is calling, as the route's ``Check`` found it before the body was read (a
    tenant's ``Caller``, an admin's ``Principal``, a console ``Session``); None: no check."""
    body_complete: bool = False
    """The whole body has been received (``read_body``, or a route that streams it)."""

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive) -> Request:
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        return cls(scope, headers, receive)

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    def query(self) -> dict[str, list[str]]:
        """The query string's parameters, each with every value it was given."""
        raw = self.scope.get("query_string", b"")
        return parse_qs(raw.decode("latin-1"), keep_blank_values=True)


def check_declared_length(headers: Mapping[str, str], limit: int) -> None:
    """413 for a ``Content-Length`` past ``limit``, before a byte of the body is read (a
    route that streams its body is held to it too)."""
    declared = headers.get("content-length")
    length = None if declared is None else decimal(declared, cap=limit + 1)
    if length is not None and length > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) as soon as it is known to exceed ``limit``."""
    check_declared_length(request.headers, limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            request.body_complete = True
            return b"".join(chunks)


async def body_chunks(request: Request) -> AsyncIterator[bytes]:
    """The body as it arrives, chunk by chunk (none empty), for a route that streams it
    (``Route.streams_body``); ``ClientDisconnected`` if the client leaves first. Limits are
    the caller's: it sees every byte before the next is read."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def unread_body(request: Request) -> bool:
    """The request declares a body that has not been received whole: answering it now
    must close the connection, or the server would go on reading (and dropping) the rest."""
    if request.body_complete:
        return False
    headers = request.headers
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip("0 ") != "")


@dataclass(slots=True)
class Response:
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    async def send(self, send: Send) -> None:
        raw = [
            (b"content-type", self.content_type.encode()),
            (b"content-length", str(len(self.body)).encode()),
        ]
        raw.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items())
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})


@dataclass(slots=True)
class FileResponse(Response):
    """``length`` bytes of the file at ``path`` from ``offset`` (``body`` unused), read and
    sent a chunk at a time: a 90 MB file never sits in memory. Each read runs in a
    thread (a cold disk must not stall the event loop); the server's flow control holds
    the next chunk until the client has taken the last. The file is opened when sending
    starts: a path that cannot be read by then fails the response like any error of a
    send."""

    path: Path = Path()
    offset: int = 0
    length: int = 0
    chunk_bytes: int = 1 << 20

    async def send(self, send: Send) -> None:
        raw = [
            (b"content-type", self.content_type.encode()),
            (b"content-length", str(self.length).encode()),
        ]
        raw.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items())
        with self.path.open("rb") as f:
            f.seek(self.offset)
            await send({"type": "http.response.start", "status": self.status, "headers": raw})
            left = self.length
            while left > 0:
                chunk = await asyncio.to_thread(f.read, min(self.chunk_bytes, left))
                if not chunk:
                    raise OSError(f"{self.path} ended {left} bytes early")
                left -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
            if self.length == 0:
                await send({"type": "http.response.body", "body": b""})


def json_response(
    content: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(_json.encode(content), status, headers=headers or {})


def error_response(exc: HeadwayError, body: Any = None) -> Response:
    """``exc`` with its status, headers and ``Retry-After``; ``body``: another API's error
    body for it (None: ``{"error": {"type", "message"}}``)."""
    merged = dict(exc.headers)
    if exc.retry_after_s is not None and exc.retry_after_s != float("inf"):
        merged["retry-after"] = str(max(1, round(exc.retry_after_s + 0.499)))
    return json_response(error_body(exc) if body is None else body, exc.status, merged)


Handler = Callable[[Request], Awaitable[Response]]


class App:
    """An ASGI application: lifespan hooks, and one handler for every HTTP request.

    The handler is expected to answer everything (the ``Edge`` does); a
    ``ClientDisconnected`` it raises means nobody is left to answer.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        on_startup: list[Hook] | None = None,
        on_shutdown: list[Hook] | None = None,
    ) -> None:
        self.handler = handler
        self._on_startup = on_startup or []
        self._on_shutdown = on_shutdown or []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            try:
                response = await self.handler(Request.from_scope(scope, receive))
            except ClientDisconnected:
                return
            await response.send(send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def add_startup_hook(self, hook: Hook) -> None:
        """Run ``hook`` after the hooks the app was built with."""
        self._on_startup.append(hook)

    async def startup(self) -> None:
        for hook in self._on_startup:
            await hook()

    async def shutdown(self) -> None:
        for hook in reversed(self._on_shutdown):
            await hook()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


DISCONNECT_EXTENSION = "headway.disconnect"
"""The ASGI scope extension of a server that cancels a request's task itself when its
client disconnects (``http/guard.py``): a ``Disconnect`` the server marks first."""


class Disconnect:
    """Set by the server before it cancels the request's task: the client is gone."""

    __slots__ = ("happened",)

    def __init__(self) -> None:
        self.happened = False


def client_left(request: Request) -> bool:
    """The server marked this request's client as gone (and cancels its task)."""
    extensions = request.scope.get("extensions")
    marked = extensions.get(DISCONNECT_EXTENSION) if extensions else None
    return isinstance(marked, Disconnect) and marked.happened


async def unless_disconnected(
    work: Awaitable[Response], request: Request, *, watched: bool = True
) -> Response:
    """Await ``work`` in this task; if the client disconnects first, cancel it (body read).

    Under headway's own server the server cancels the task (``DISCONNECT_EXTENSION``):
    nothing to start per request. Elsewhere one watcher task per request cancels this
    one on ``http.disconnect``, unless ``watched`` is False: a handler that reads the body
    itself (``body_chunks``) owns ``receive``, and sees the disconnect there.
    """
    handler_task = asyncio.current_task()
    assert handler_task is not None
    extensions = request.scope.get("extensions")
    marked = extensions.get(DISCONNECT_EXTENSION) if extensions else None
    if isinstance(marked, Disconnect):
        try:
            return await work
        except asyncio.CancelledError:
            if marked.happened:
                handler_task.uncancel()
                raise ClientDisconnected from None
            raise
    if not watched:
        return await work
    disconnected = False
    receive = request.receive

    async def watch() -> None:
        nonlocal disconnected
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected = True
        handler_task.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if disconnected:
            handler_task.uncancel()
            raise ClientDisconnected from None
        raise
    finally:
        watcher.cancel()
