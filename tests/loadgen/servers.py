"""Tiny HTTP/1.1 servers on 127.0.0.1 for the load generator's tests.

``FixedServer`` answers every request with the same bytes (a 503, as the
gateway's fast refusal), as cheaply as asyncio allows: the yardstick for the
client's own cost. ``ScriptedServer`` answers by the request's API key, so one
workload can mix outcomes: ``ok`` 200, ``shed`` 503, ``quota`` 429, ``late``
504, ``boom`` 500 (a JSON error), ``teapot`` 418 (plain text), ``slow`` 200
after ``slow_s``, ``hang`` never, ``drop`` closes the connection; and while
``stall()`` holds, every answer waits. It counts the requests it holds
unanswered (``in_flight``) and the most it ever held at once.

``scripted_server`` runs one for a test; ``wait_until`` polls a condition under a
deadline, for tests that wait on one.

Run as a script (``python -m tests.loadgen.servers PORT``) it serves the fixed
503 until killed, for measuring the client from another process.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import cast

_REFUSAL = b'{"error": {"type": "overloaded", "message": "no capacity now"}}'
FIXED_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(_REFUSAL), _REFUSAL)
)


def _content_length(head: bytes) -> int:
    at = head.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at + 2)
    return int(head[at + 17 : end if end >= 0 else len(head)])


def _requests(buffer: bytearray) -> list[bytes]:
    """Complete requests' heads taken off the front of ``buffer``."""
    heads = []
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return heads
        head = bytes(buffer[:end]).lower()
        length = _content_length(head)
        if len(buffer) < end + 4 + length:
            return heads
        del buffer[: end + 4 + length]
        heads.append(head)


class _FixedProtocol(asyncio.Protocol):
    def __init__(self, server: FixedServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.server.transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.server.transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        count = len(_requests(self.buffer))
        if count and self.transport is not None:
            self.server.served += count
            self.transport.write(self.server.response * count)


class FixedServer:
    """Answers ``response`` to every request."""

    def __init__(self, response: bytes = FIXED_503) -> None:
        self.response = response
        self.served = 0
        self.port = 0
        self.transports: set[asyncio.Transport] = set()
        self.server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: _FixedProtocol(self), "127.0.0.1", port, backlog=4096
        )
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for transport in list(self.transports):
                transport.abort()
            await self.server.wait_closed()


def _key(head: bytes) -> str:
    at = head.find(b"\r\nauthorization: bearer ")
    if at < 0:
        return ""
    end = head.find(b"\r\n", at + 2)
    return head[at + 24 : end if end >= 0 else len(head)].decode()


def _response(status: int, body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s" % (
        status,
        extra,
        len(body),
        body,
    )


class _ScriptedProtocol(asyncio.Protocol):
    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.server.transports.add(transport)
        self.task = asyncio.get_running_loop().create_task(self._answer())
        self.server.tasks.add(self.task)
        self.task.add_done_callback(self.server.tasks.discard)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        for head in _requests(self.buffer):
            self.server.in_flight += 1
            self.server.peak_in_flight = max(self.server.peak_in_flight, self.server.in_flight)
            self.queue.put_nowait(head)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.server.transports.discard(self.transport)
        if self.task is not None:
            self.task.cancel()

    async def _answer(self) -> None:
        assert self.transport is not None
        while True:
            head = await self.queue.get()
            try:
                if not await self._reply(self.transport, _key(head)):
                    return
            finally:
                self.server.in_flight -= 1

    async def _reply(self, transport: asyncio.Transport, key: str) -> bool:
        """Answer one request; False when the connection is closed instead."""
        self.server.received.append(key)
        for hook in self.server.on_request:
            hook(key)
        await self.server.open.wait()
        if key == "hang":
            await asyncio.Event().wait()
        if key == "drop":
            transport.close()
            return False
        if key == "slow":
            await asyncio.sleep(self.server.slow_s)
        transport.write(self.server.replies[key])
        return True


class ScriptedServer:
    """Answers by API key (see the module docstring); counts what it received."""

    def __init__(self, slow_s: float = 0.2) -> None:
        self.slow_s = slow_s
        self.received: list[str] = []
        self.in_flight = 0  # requests read and not yet answered, on all connections
        self.peak_in_flight = 0
        self.on_request: list[Callable[[str], None]] = []
        self.open = asyncio.Event()
        self.open.set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.transports: set[asyncio.Transport] = set()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.replies = {
            "ok": _response(200, b'{"data": []}'),
            "slow": _response(200, b'{"data": []}'),
            "shed": _response(503, extra=b"retry-after: 2\r\n"),
            "quota": _response(429, extra=b"retry-after: 1\r\n"),
            "late": _response(504),
            "boom": _response(500, b'{"error": {"type": "internal_error", "message": "boom"}}'),
            "teapot": _response(418, b"short and stout"),
        }

    def stall(self, seconds: float) -> None:
        """Hold every answer for ``seconds`` from now."""
        self.open.clear()
        asyncio.get_running_loop().call_later(seconds, self.open.set)

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _ScriptedProtocol(self), "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for transport in list(self.transports):
                transport.abort()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.server.wait_closed()


@asynccontextmanager
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    """A started ``ScriptedServer``, stopped on the way out."""
    server = ScriptedServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


def main() -> None:  # pragma: no cover - a measuring tool
    import uvloop

    async def serve() -> None:
        server = FixedServer()
        port = await server.start(int(sys.argv[1]))
        print(f"serving a fixed 503 on 127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
