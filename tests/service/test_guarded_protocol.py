"""The guarded protocol on a loopback socket in this process: uvicorn's own protocol, a
small ASGI app, raw clients bound to chosen 127/8 addresses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from asyncio.selector_events import _SelectorSocketTransport
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import uvloop
from uvicorn.server import ServerState

from headway.http.asgi import DISCONNECT_EXTENSION, Disconnect
from headway.http.connection_caps import Refusal
from headway.http.connection_metrics import TimeoutPhase
from headway.http.guard import COALESCE_BYTES, EdgeGuard, guarded_protocol
from headway.serve import listening_socket
from headway.settings import EdgeLimits
from headway.tls.contexts import client_context, server_context
from headway.tls.folder import init
from headway.tls.identity import PEER_EXTENSION

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

    read_gate: asyncio.Event = field(default_factory=asyncio.Event)
    """``/late-read`` reads its body only once this is set."""
    waiting_to_read: asyncio.Event = field(default_factory=asyncio.Event)
    body_sizes: list[int] = field(default_factory=list)
    schemes: list[str] = field(default_factory=list)
    peers: list[frozenset[str] | None] = field(default_factory=list)
    """Each request's client certificate names (``PEER_EXTENSION``), None without one."""

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        assert scope["type"] == "http"
        self.schemes.append(scope["scheme"])
        self.peers.append(scope["extensions"].get(PEER_EXTENSION))
        if scope["path"] == "/early":  # refused from its headers, as the edge does
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-length", b"2"), (b"connection", b"close")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b"no"})
            return
        if scope["path"] == "/big":  # three chunks, each as large as a write is held for
            chunk = b"x" * COALESCE_BYTES
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-length", str(3 * len(chunk)).encode())]})  # fmt: skip
            for last in (False, False, True):
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            return
        if scope["path"] == "/late-read":
            self.waiting_to_read.set()
            await self.read_gate.wait()
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        self.body_sizes.append(size)
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
async def serving(
    limits: EdgeLimits,
    tls: ssl.SSLContext | None = None,
    callers: frozenset[str] | None = None,
) -> AsyncIterator[Served]:
    observer, app = RecordingObserver(), HeldApp()
    guard = EdgeGuard(limits, observer=observer, tls=tls, callers=callers)
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
        app.read_gate.set()
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


async def test_each_answer_leaves_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn writes a response's head and body apart; the guarded transport sends what
    one turn of the event loop wrote as one write: one system call, one segment."""
    writes: list[tuple[int, bytes]] = []
    original = _SelectorSocketTransport.write

    def counted(transport: _SelectorSocketTransport, data: Any) -> None:
        writes.append((transport.get_extra_info("sockname")[1], bytes(data)))
        original(transport, data)

    monkeypatch.setattr(_SelectorSocketTransport, "write", counted)
    async with serving(SHORT) as served:
        reader, writer = await served.connect()
        for _ in range(2):  # the same connection, kept alive
            writer.write(GET)
            await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        answers = [data for port, data in writes if port == served.port]
        assert len(answers) == 2, answers
        assert all(a.startswith(b"HTTP/1.1 200") and a.endswith(b"\r\n\r\nok") for a in answers)
        # A large answer is not held: each chunk goes at once, into the transport's flow
        # control, as uvicorn wrote it (the head with the first).
        writes.clear()
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"x" * 16), WAIT_S)
        await asyncio.wait_for(reader.readexactly(3 * COALESCE_BYTES - 16), WAIT_S)
        big = [data for port, data in writes if port == served.port]
        assert [len(data) >= COALESCE_BYTES for data in big] == [True, True, True], big


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


# Every byte of the request line and headers counts, however the reads split them.

CAPPED = EdgeLimits(header_timeout_s=5.0, idle_timeout_s=5.0, max_header_bytes=4096)


def request_with_headers_of(size: int) -> bytes:
    """A GET whose request line and headers are exactly ``size`` bytes."""
    head = b"GET /ok HTTP/1.1\r\nHost: x\r\nx-pad: "
    return head + b"a" * (size - len(head) - 4) + b"\r\n\r\n"


async def test_headers_over_the_cap_in_one_read_are_refused_431_before_they_are_parsed():
    async with serving(CAPPED) as served:
        reader, writer = await served.connect()
        writer.write(request_with_headers_of(4097))  # one write, one read: all complete
        status, error, headers = error_of(await until_closed(reader))
        assert (status, error, headers["connection"]) == (431, "headers_too_large", "close")
        assert served.observer.refusals == {"max_header_bytes": 1}
        assert served.app.body_sizes == []  # the app never saw it

        reader, writer = await served.connect()
        writer.write(request_with_headers_of(4096))  # at the cap exactly: served
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)).startswith(b"HTTP/1.1 200")
        assert served.observer.refusals == {"max_header_bytes": 1}


async def test_headers_over_the_cap_split_across_many_reads_are_refused_431():
    async with serving(CAPPED) as served:
        reader, writer = await served.connect()
        request = request_with_headers_of(4097)
        for start in range(0, len(request), 100):  # 41 reads, each waited for by the server
            writer.write(request[start : start + 100])
            await writer.drain()
            await asyncio.sleep(0.005)  # the client's pace: the reads arrive apart
        status, error, _ = error_of(await until_closed(reader))
        assert (status, error) == (431, "headers_too_large")
        assert served.observer.refusals == {"max_header_bytes": 1}


async def test_the_blank_line_ending_the_headers_may_straddle_two_reads():
    async with serving(CAPPED) as served:
        reader, writer = await served.connect()
        body = b"b" * 10_000  # past the cap, in the same read as the end of the headers
        head = b"POST /ok HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
        writer.write(head[:-2])
        await writer.drain()
        await served.until(lambda: served.guard.caps.open == 1, "admitted")
        await asyncio.sleep(0.01)  # the client's pace: two reads
        writer.write(head[-2:] + body)
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        assert answer.startswith(b"HTTP/1.1 200") and served.app.body_sizes == [10_000]
        assert served.observer.refusals == {}


async def test_a_pipelined_request_with_headers_over_the_cap_is_refused_too():
    async with serving(CAPPED) as served:
        reader, writer = await served.connect()
        writer.write(GET + request_with_headers_of(8000))  # the second begins mid-read
        status, error, _ = error_of(await until_closed(reader))
        assert (status, error) == (431, "headers_too_large")  # bounded by the parser's count
        assert served.observer.refusals == {"max_header_bytes": 1}


# A body must keep arriving: the pace rule.

PACED = EdgeLimits(body_timeout_s=0.3, body_min_rate_bytes_s=1000.0, idle_timeout_s=5.0)


def post(path: bytes, length: int) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\n\r\n" % (path, length)


async def test_a_body_that_stalls_is_answered_408_and_closed_after_its_allowance():
    async with serving(PACED) as served:
        reader, writer = await served.connect()
        started = asyncio.get_running_loop().time()
        writer.write(post(b"/ok", 100) + b"x" * 9)  # 9 of 100 bytes, then nothing
        status, error, headers = error_of(await until_closed(reader))
        waited = asyncio.get_running_loop().time() - started
        assert (status, error, headers["connection"]) == (408, "request_timeout", "close")
        assert 0.3 <= waited < 0.3 + 9 / 1000 + 2.0
        assert served.observer.timeouts == {"body": 1}
        await served.until(lambda: served.guard.caps.open == 0, "its slot released")


async def test_a_body_that_keeps_the_minimum_pace_is_read_to_the_end():
    async with serving(PACED) as served:
        reader, writer = await served.connect()
        writer.write(post(b"/ok", 600))
        for _ in range(6):  # 100 bytes every 50 ms: 2,000 bytes/s, past the 0.3 s allowance
            writer.write(b"y" * 100)
            await writer.drain()
            await asyncio.sleep(0.05)  # the client's pace
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        assert answer.startswith(b"HTTP/1.1 200") and served.app.body_sizes == [600]
        assert served.observer.timeouts == {}


async def test_time_the_server_is_not_reading_is_not_held_against_the_client():
    # A minimum rate so high that only the allowance counts: 0.3 s for the whole body.
    async with serving(EdgeLimits(body_timeout_s=0.3, body_min_rate_bytes_s=1e12)) as served:
        reader, writer = await served.connect()
        body = b"z" * 1_000_000  # far more than uvicorn buffers before it stops reading
        writer.write(post(b"/late-read", len(body)) + body[:10])
        await asyncio.wait_for(served.app.waiting_to_read.wait(), WAIT_S)
        writer.write(body[10:])  # a read apart: the body's clock ran, then reading stopped
        await asyncio.sleep(0.6)  # what the test is about: twice the allowance passes
        served.app.read_gate.set()
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)
        assert answer.startswith(b"HTTP/1.1 200") and served.app.body_sizes == [len(body)]
        assert served.observer.timeouts == {}


# TLS: the handshake runs under the guard, from the connection's first moment.


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    init(folder, days=2, ca_days=3)
    return folder


async def test_a_client_that_never_says_hello_is_held_only_for_the_header_timeout(certificates):
    tls = server_context(certificates / "public.crt", certificates / "public.key")
    async with serving(SHORT, tls) as served:
        reader, _ = await served.connect()  # plain TCP, and then nothing: no ClientHello
        await served.until(lambda: served.guard.caps.open == 1, "counted while it handshakes")
        assert await until_closed(reader) == b""
        assert served.observer.timeouts == {"handshake": 1}
        await served.until(lambda: served.guard.caps.open == 0, "its slot released")


async def test_a_tls_client_is_served_over_https_and_a_plain_one_is_refused(certificates):
    tls = server_context(certificates / "public.crt", certificates / "public.key")
    async with serving(EdgeLimits(), tls) as served:
        client = client_context(ca=certificates / "ca.crt")
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", served.port, ssl=client, server_hostname="localhost"
        )
        served.clients.append(writer)
        writer.write(GET)
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)).startswith(b"HTTP/1.1 200")
        assert served.app.schemes == ["https"]

        plain, plain_writer = await served.connect()
        plain_writer.write(GET)  # HTTP where TLS was expected
        assert await until_closed(plain) == b""
        assert served.observer.refusals == {"tls_handshake": 1}
        await served.until(lambda: served.guard.caps.open == 1, "only the TLS client holds one")


def test_the_handshake_is_guarded_on_uvloop_too(certificates):
    """The servers run uvloop, whose SSL protocol is its own: the same stall and the same
    served client on it."""
    tls = server_context(certificates / "public.crt", certificates / "public.key")

    async def check() -> None:
        async with serving(SHORT, tls) as served:
            stalled, _ = await served.connect()
            client = client_context(ca=certificates / "ca.crt")
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", served.port, ssl=client, server_hostname="localhost"
            )
            served.clients.append(writer)
            writer.write(GET)
            assert (await asyncio.wait_for(reader.readuntil(b"ok"), WAIT_S)).endswith(b"ok")
            assert await until_closed(stalled) == b""
            assert served.observer.timeouts["handshake"] == 1
            await served.until(lambda: served.guard.caps.open == 1, "the stalled one released")

    uvloop.run(check())


async def send_then_read(served: Served, body_bytes: int) -> bytes:
    """A client as most are: the whole body sent before it reads the answer; what it read
    (nothing if the connection was reset under it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(post(b"/early", body_bytes))
    chunk = b"x" * (64 << 10)
    try:
        for _ in range(body_bytes // len(chunk)):
            writer.write(chunk)
            await writer.drain()
        return await until_closed(reader)
    except ConnectionError:
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_an_answer_before_the_body_lingers_so_the_client_reads_it_not_a_reset():
    async with serving(EdgeLimits(linger_s=5.0, linger_bytes=16 << 20)) as served:
        answer = await send_then_read(served, 8 << 20)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:40]
    assert served.app.body_sizes == []  # the app never read it: only the guard dropped it


async def test_a_refused_body_is_read_only_up_to_the_linger_bound_then_cut():
    async with serving(EdgeLimits(linger_s=5.0, linger_bytes=64 << 10)) as served:
        answer = await send_then_read(served, 32 << 20)
    assert not answer.startswith(b"HTTP/1.1 401")  # reset: 32 MiB were not read for it


async def test_without_lingering_the_same_client_gets_a_reset():
    async with serving(EdgeLimits(linger_s=0.0)) as served:
        answer = await send_then_read(served, 8 << 20)
    assert not answer.startswith(b"HTTP/1.1 401")
