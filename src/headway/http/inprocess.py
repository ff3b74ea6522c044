"""A transport that calls ASGI apps in this process: the fake for the replica seam."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from headway.gateway.transport import ConnectFailed, Reply, TransportTimeout
from headway.http.asgi import App, Message


class AsgiTransport:
    """Routes ``base_url`` to an app; an unknown or ``down`` URL behaves as connection refused."""

    def __init__(self, apps: Mapping[str, App]) -> None:
        self.apps = dict(apps)
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    async def post(
        self, base_url: str, path: str, body: bytes, content_type: str, timeout_s: float
    ) -> Reply:
        return await self._call(base_url, "POST", path, body, content_type, timeout_s)

    async def get(self, base_url: str, path: str, timeout_s: float) -> Reply:
        return await self._call(base_url, "GET", path, b"", "", timeout_s)

    async def close(self) -> None:
        pass

    async def _call(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        content_type: str,
        timeout_s: float,
    ) -> Reply:
        app = self.apps.get(base_url)
        if app is None or base_url in self.down:
            raise ConnectFailed(f"connection refused: {base_url}")
        self.calls.append((base_url, path))
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(b"content-type", content_type.encode())] if content_type else [],
        }
        sent: list[Message] = []
        delivered = False
        forever = asyncio.Event()

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await forever.wait()  # the client never disconnects on its own
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        try:
            await asyncio.wait_for(app(scope, receive, send), timeout_s)
        except TimeoutError as exc:
            raise TransportTimeout(f"{method} {base_url}{path} timed out") from exc
        start, *bodies = sent
        headers = {k.decode(): v.decode() for k, v in start["headers"]}
        return Reply(start["status"], b"".join(m.get("body", b"") for m in bodies), headers)
