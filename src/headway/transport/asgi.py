"""A transport that calls ASGI apps in this process: the worker apps of a service test."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from headway.http.asgi import App, Message
from headway.transport.base import ConnectFailed, Reply, TransportTimeout, UpstreamRequest


class AsgiTransport:
    """Routes ``base_url`` to an app; an unknown or ``down`` URL behaves as connection refused."""

    def __init__(self, apps: Mapping[str, App]) -> None:
        self.apps = dict(apps)
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    async def close(self) -> None:
        pass

    async def send(self, request: UpstreamRequest) -> Reply:
        app = self.apps.get(request.base_url)
        if app is None or request.base_url in self.down:
            raise ConnectFailed(f"connection refused: {request.base_url}")
        self.calls.append((request.base_url, request.path))
        content_type = request.content_type.encode()
        sent_headers = [(b"content-type", content_type)] if content_type else []
        if request.traceparent is not None:
            sent_headers.append((b"traceparent", request.traceparent.encode()))
        scope = {
            "type": "http",
            "method": request.method,
            "path": request.path,
            "headers": sent_headers,
        }
        sent: list[Message] = []
        delivered = False
        forever = asyncio.Event()

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await forever.wait()  # the client never disconnects on its own
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        try:
            await asyncio.wait_for(app(scope, receive, send), request.timeout_s)
        except TimeoutError as exc:
            raise TransportTimeout(f"{request.method} {request.url} timed out") from exc
        start, *bodies = sent
        headers = {k.decode(): v.decode() for k, v in start["headers"]}
        return Reply(start["status"], b"".join(m.get("body", b"") for m in bodies), headers)
