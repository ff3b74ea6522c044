"""The guarded protocol on a loopback socket in this process: uvicorn's own protocol, a
small ASGI app, raw clients bound to chosen 127/8 addresses."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from headway.http.asgi import DISCONNECT_EXTENSION, Disconnect
from headway.http.connection_caps import Refusal
from headway.http.connection_metrics import TimeoutPhase
from headway.http.guard import EdgeGuard, guarded_protocol
from headway.serve import listening_socket
from headway.settings import EdgeLimits

WAIT_S = 10.0  # deadline for a condition that should come far sooner
SHORT = EdgeLimits(header_timeout_s=0.2, idle_timeout_s=0.3)
GET = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"
HALF = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n"


class RecordingObserver:
    def __init__(self) -> None:
        self.refusals: Counter[Refusal] = Counter()
        self.timeouts: Counter[TimeoutPhase] = Counter()

    def refused(self, reason: Refusal) -> None:
        self.refusals[reason] += 1

    def timed_out(self, phase: TimeoutPhase) -> None:
        self.timeouts[phase] += 1


@dataclass
class HeldApp:
    """Answers 200 ``ok``; ``/hold`` answers only once ``release`` is set."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    disconnect: Disconnect | None = None

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        assert scope["type"] == "http"
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/hold":
            self.disconnect = scope["extensions"][DISCONNECT_EXTENSION]
            self.entered.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"ok"})


@dataclass
class Served:
    port: int
    guard: EdgeGuard
    observer: RecordingObserver
    app: HeldApp
    clients: list[asyncio.StreamWriter] = field(default_factory=list)

    async def connect(
        self, source: str = "127.0.0.1"
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, local_addr=(source, 0)
        )
        self.clients.append(writer)
        return reader, writer

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
            await asyncio.sleep(0.01)


@asynccontextmanager
async def serving(limits: EdgeLimits) -> AsyncIterator[Served]:
    observer, app = RecordingObserver(), HeldApp()
    guard = EdgeGuard(limits, observer=observer)
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False, ws="none")
    config.load()
    state = ServerState()
    protocol = guarded_protocol(guard)
    sock = listening_socket("127.0.0.1", 0)
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), sock=sock
    )
    served = Served(sock.getsockname()[1], guard, observer, app)
    try:
        yield served
    finally:
        app.release.set()
        for writer in served.clients:
            writer.close()
            await writer.wait_closed()
        server.close()
        for connection in list(state.connections):
            connection.transport.close()
        await server.wait_closed()


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent before it closed the connection."""
    return await asyncio.wait_for(reader.read(), WAIT_S)


def error_of(answer: bytes) -> tuple[int, str, dict[str, str]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), json.loads(body)["error"]["type"], headers


async def test_a_silent_connection_is_closed_without_a_word_after_the_header_timeout():
    async with serving(SHORT) as served:
        reader, _ = await served.connect()
        await served.until(lambda: served.guard.caps.open == 1, "the connection admitted")
        assert await until_closed(reader) == b""
        assert served.observer.timeouts == {"headers": 1}
        await served.until(lambda: served.guard.caps.open == 0, "its slot released")


async def test_half_a_request_gets_a_json_408_and_is_closed():
    async with serving(SHORT) as served:
        reader, writer = await served.connect()
        writer.write(HALF)
        status, error, headers = error_of(await until_closed(reader))
        assert (status, error, headers["connection"]) == (408, "request_timeout", "close")
        assert served.observer.timeouts == {"headers": 1}


async def test_a_slow_drip_of_header_bytes_is_dropped_like_a_silent_client():
    async with serving(SHORT) as served:
        reader, writer = await served.connect()

        async def drip() -> None:  # never done in time: one byte per 20 ms
            for byte in HALF * 100:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.02)  # the client's pace, not a wait for the server

        dripping = asyncio.create_task(drip())
        try:
            status, error, _ = error_of(await until_closed(reader))
        finally:
            dripping.cancel()
        assert (status, error) == (408, "request_timeout")


async def test_a_kept_alive_connection_serves_requests_then_closes_after_the_idle_timeout():
    async with serving(SHORT) as served:
        reader, writer = await served.connect()
        for _ in range(2):  # the same connection, kept alive
            writer.write(GET)
            assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)).startswith(
                b"HTTP/1.1 200"
            )
        assert await until_closed(reader) == b""  # idle: closed without a word
        assert served.observer.timeouts == {"idle": 1}


async def test_blank_lines_after_a_response_do_not_hold_the_connection_past_the_header_timeout():
    async with serving(EdgeLimits(header_timeout_s=0.2, idle_timeout_s=600)) as served:
        reader, writer = await served.connect()
        writer.write(GET)
        await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        writer.write(b"\r\n")  # stops the idle timer, begins no request
        assert await until_closed(reader) == b""
        assert served.observer.timeouts == {"headers": 1}


async def test_a_request_whose_headers_are_in_is_never_cut_by_the_header_timer():
    async with serving(SHORT) as served:
        reader, writer = await served.connect()
        writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n" + HALF)  # and a late pipelined one
        await asyncio.wait_for(served.app.entered.wait(), WAIT_S)
        # A silent connection opened now is timed out only after header_timeout_s has
        # passed since the held request's headers were in: the clock for this test.
        clock, _ = await served.connect()
        assert await until_closed(clock) == b""
        served.app.release.set()
        answer = await until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")  # then closed
        assert served.observer.timeouts == {"headers": 2}  # the clock and the late one


async def test_a_client_over_its_cap_is_answered_503_at_once_while_others_are_served():
    async with serving(EdgeLimits(max_connections=10, max_connections_per_client=2)) as served:
        held = [await served.connect() for _ in range(2)]
        await served.until(lambda: served.guard.caps.open == 2, "both admitted")
        reader, _ = await served.connect()
        status, error, headers = error_of(await until_closed(reader))
        assert (status, error, headers["connection"]) == (503, "too_many_connections", "close")
        assert served.observer.refusals == {"max_connections_per_client": 1}

        other_reader, other_writer = await served.connect("127.0.0.2")
        other_writer.write(GET)
        assert (await asyncio.wait_for(other_reader.readuntil(b"ok"), WAIT_S)).startswith(
            b"HTTP/1.1 200"
        )
        held[0][1].close()  # a slot comes back when a connection closes
        await served.until(lambda: served.guard.caps.open_from("127.0.0.1") == 1, "released")
        again_reader, again_writer = await served.connect()
        again_writer.write(GET)
        assert (await asyncio.wait_for(again_reader.readuntil(b"ok"), WAIT_S)).startswith(
            b"HTTP/1.1 200"
        )


async def test_a_full_process_refuses_every_address():
    async with serving(EdgeLimits(max_connections=2, max_connections_per_client=2)) as served:
        held = [await served.connect("127.0.0.1"), await served.connect("127.0.0.2")]
        await served.until(lambda: served.guard.caps.open == 2, "both admitted")
        reader, _ = await served.connect("127.0.0.3")
        status, error, _ = error_of(await until_closed(reader))
        assert (status, error) == (503, "too_many_connections")
        assert served.observer.refusals == {"max_connections": 1}
        assert len(held) == 2


async def test_headers_past_the_limit_get_a_json_431_while_a_large_body_is_read():
    limits = EdgeLimits(header_timeout_s=5.0, idle_timeout_s=5.0, max_header_bytes=2048)
    async with serving(limits) as served:
        reader, writer = await served.connect()
        writer.write(HALF + b"x-padding: " + b"a" * 4096 + b"\r\n")
        status, error, headers = error_of(await until_closed(reader))
        assert (status, error, headers["connection"]) == (431, "headers_too_large", "close")
        assert served.observer.refusals == {"max_header_bytes": 1}
        await served.until(lambda: served.guard.caps.open == 0, "its slot released")

        body = b"b" * 100_000  # far past max_header_bytes, sent with small headers at once
        reader, writer = await served.connect()
        writer.write(
            b"POST /ok HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        assert answer.startswith(b"HTTP/1.1 200")
        assert served.observer.refusals == {"max_header_bytes": 1}


async def test_a_client_that_leaves_mid_request_has_its_task_marked_and_cancelled():
    async with serving(EdgeLimits()) as served:
        _, writer = await served.connect()
        writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(served.app.entered.wait(), WAIT_S)
        assert served.app.disconnect is not None and not served.app.disconnect.happened
        writer.close()
        await asyncio.wait_for(served.app.cancelled.wait(), WAIT_S)
        assert served.app.disconnect.happened  # what tells the app it was the client


async def test_a_request_answered_in_full_is_never_marked():
    async with serving(EdgeLimits()) as served:
        reader, writer = await served.connect()
        writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(served.app.entered.wait(), WAIT_S)
        served.app.release.set()
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)).endswith(b"ok")
        writer.close()
        await served.until(lambda: served.guard.caps.open == 0, "the connection closed")
        assert served.app.disconnect is not None and not served.app.disconnect.happened
        assert not served.app.cancelled.is_set()
