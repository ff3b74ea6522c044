"""A minimal ASGI toolkit: request, response, routing, error edge.

The gateway's CPU per request matters more than convenience, so headway speaks
raw ASGI (about 4x cheaper than a full framework here) with exactly what it
needs: exact-path routing, bounded body reads, a JSON error edge that never
leaks a traceback, lifespan hooks, and cancellation of a handler whose client
has gone away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from headway.errors import (
    HeadwayError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    error_body,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Hook = Callable[[], Awaitable[None]]

_json = msgspec.json.Encoder()


class ClientDisconnected(Exception):
    """The client closed the connection before the response was sent."""


@dataclass(slots=True)
class Request:
    scope: Scope
    headers: dict[str, str]
    body: bytes = b""

    @classmethod
    def from_scope(cls, scope: Scope) -> Request:
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        return cls(scope, headers)

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])


async def read_body(headers: Mapping[str, str], receive: Receive, limit: int) -> bytes:
    """The whole body, refusing (413) as soon as it is known to exceed ``limit``."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


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


def json_response(
    content: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(_json.encode(content), status, headers=headers or {})


def error_response(exc: HeadwayError) -> Response:
    merged = dict(exc.headers)
    if exc.retry_after_s is not None and exc.retry_after_s != float("inf"):
        merged["retry-after"] = str(max(1, round(exc.retry_after_s + 0.499)))
    return json_response(error_body(exc), exc.status, merged)


Handler = Callable[[Request], Awaitable[Response]]
ErrorHook = Callable[[Request, HeadwayError | None], None]


class Router:
    """Exact-path routes; 404 for an unknown path, 405 for a known one with another method."""

    def __init__(self) -> None:
        self._routes: dict[str, dict[str, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        self._routes.setdefault(path, {})[method] = handler

    def paths(self) -> dict[str, list[str]]:
        return {path: sorted(methods) for path, methods in self._routes.items()}

    def resolve(self, method: str, path: str) -> Handler:
        methods = self._routes.get(path)
        if methods is None:
            raise NotFound(f"no route for {path}")
        handler = methods.get(method)
        if handler is None:
            raise MethodNotAllowed(f"{method} is not allowed on {path}")
        return handler


class App:
    """An ASGI application: lifespan hooks, routing, and the error edge.

    The body is read (up to ``max_body_bytes``) before the handler runs; then,
    with ``watch_disconnect``, the handler runs as a task that is cancelled if
    the client disconnects first, so upstream work stops with it.
    """

    def __init__(
        self,
        router: Router,
        *,
        on_startup: list[Hook] | None = None,
        on_shutdown: list[Hook] | None = None,
        on_error: ErrorHook | None = None,
        max_body_bytes: int = 1 << 20,
        watch_disconnect: bool = False,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self.router = router
        self._on_startup = on_startup or []
        self._on_shutdown = on_shutdown or []
        self._on_error = on_error
        self._watch_disconnect = watch_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

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

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request.from_scope(scope)
        try:
            handler = self.router.resolve(request.method, request.path)
            request.body = await read_body(request.headers, receive, self._max_body_bytes)
            if self._watch_disconnect:
                response = await _unless_disconnected(handler(request), receive)
            else:
                response = await handler(request)
        except ClientDisconnected:
            self._report(request, None)
            return
        except HeadwayError as exc:
            self._report(request, exc)
            response = error_response(exc)
        except Exception:
            # Never echo the exception: it may quote the request's text.
            log.exception("unhandled error on %s %s", request.method, request.path)
            self._report(request, None)
            response = json_response(
                {"error": {"type": "internal_error", "message": "internal error"}}, 500
            )
        await response.send(send)

    def _report(self, request: Request, exc: HeadwayError | None) -> None:
        if self._on_error is not None:
            self._on_error(request, exc)


async def _unless_disconnected(work: Awaitable[Response], receive: Receive) -> Response:
    """Await ``work`` in this task; if the client disconnects first, cancel it (body read).

    One watcher task per request, which cancels this one on ``http.disconnect``.
    """
    handler_task = asyncio.current_task()
    assert handler_task is not None
    disconnected = False

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
