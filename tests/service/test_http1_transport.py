"""``Http1Transport`` against real loopback servers: answers, reuse, timeouts, cancellation,
broken and refused connections, idle expiry and TLS contexts that change."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from headway.settings import TlsSettings
from headway.tls.folder import init
from headway.tls.hops import internal_client, internal_server
from headway.tls.names import WORKER_NAME
from headway.tls.reload import FixedContext
from headway.transport.base import (
    ConnectFailed,
    TransportError,
    TransportTimeout,
    UpstreamRequest,
)
from headway.transport.http1 import Http1Transport

Answer = Callable[[bytes], bytes | None]
"""The raw request (head and body) → the raw response, or None: close without answering."""


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


@dataclass
class Server:
    """A loopback HTTP/1.1 server: ``answer`` decides each response; it records what came."""

    answer: Answer
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                raw = head + await reader.readexactly(length)
                self.requests.append(raw)
                response = self.answer(raw)
                if response is None:
                    break
                if response:
                    writer.write(response)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.closed.set()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., asyncio.Future[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer, context: ssl.SSLContext | None = None) -> Server:
        server = Server(answer)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=context)
        server.port = listener.sockets[0].getsockname()[1]
        servers.append(listener)
        return server

    yield start  # type: ignore[misc]
    for listener in servers:
        listener.close()


def call(url: str, body: bytes = b"{}", timeout_s: float = 5.0, **kw: str) -> UpstreamRequest:
    return UpstreamRequest("POST", url, "/internal/embed", timeout_s, body, "application/x", **kw)


async def test_a_call_gets_status_body_and_headers_and_sends_what_it_was_given(serve):
    server = await serve(lambda raw: ok(b"answer", "Retry-After: 3", "X-Model: AbC"))
    transport = Http1Transport()
    reply = await transport.send(call(server.url(), b"payload", traceparent="00-ab-cd-01"))
    assert (reply.status, reply.body) == (200, b"answer")
    assert reply.headers["retry-after"] == "3"
    assert reply.headers["x-model"] == "AbC"  # names lowered, values as sent
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /internal/embed HTTP/1.1\r\n")
    assert b"\r\ncontent-type: application/x" in head
    assert b"\r\ntraceparent: 00-ab-cd-01" in head
    assert f"\r\nhost: 127.0.0.1:{server.port}".encode() in head
    assert body == b"payload"
    await transport.close()


async def test_calls_one_after_another_reuse_one_connection(serve):
    server = await serve(lambda raw: ok(b"x"))
    transport = Http1Transport()
    for _ in range(5):
        assert (await transport.send(call(server.url()))).status == 200
    assert server.connections == 1
    await transport.close()


async def test_calls_at_once_each_get_a_connection_then_share_them(serve):
    server = await serve(lambda raw: ok(raw.rpartition(b"\r\n\r\n")[2]))
    transport = Http1Transport()
    bodies = [f"body-{i}".encode() for i in range(8)]
    replies = await asyncio.gather(*(transport.send(call(server.url(), b)) for b in bodies))
    assert [r.body for r in replies] == bodies  # each answer reached its own caller
    opened = server.connections
    await asyncio.gather(*(transport.send(call(server.url(), b)) for b in bodies))
    assert server.connections == opened == 8
    await transport.close()


async def test_a_chunked_answer_is_put_together(serve):
    head = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = head + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    server = await serve(lambda raw: chunked)
    transport = Http1Transport()
    reply = await transport.send(call(server.url()))
    assert (reply.status, reply.body) == (503, b"abcde")
    await transport.close()


async def test_no_answer_in_time_is_a_timeout_and_that_connection_is_not_reused(serve):
    answers = iter([b"", ok(b"late?")])  # the first call gets nothing back
    server = await serve(lambda raw: next(answers))
    transport = Http1Transport()
    with pytest.raises(TransportTimeout):
        await transport.send(call(server.url(), timeout_s=0.05))
    await server.closed.wait()  # the timed-out connection was dropped
    assert (await transport.send(call(server.url()))).body == b"late?"
    assert server.connections == 2
    await transport.close()


async def test_a_cancelled_call_drops_its_connection(serve):
    held = asyncio.Event()
    answers = iter([b"", ok(b"fresh")])

    def answer(raw: bytes) -> bytes | None:
        held.set()
        return next(answers)

    server = await serve(answer)
    transport = Http1Transport()
    task = asyncio.create_task(transport.send(call(server.url())))
    await held.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.closed.wait()
    assert (await transport.send(call(server.url()))).body == b"fresh"
    assert server.connections == 2
    await transport.close()


async def test_a_connection_closed_mid_call_is_a_transport_error_not_a_refusal(serve):
    server = await serve(lambda raw: None)
    transport = Http1Transport()
    with pytest.raises(TransportError) as caught:
        await transport.send(call(server.url()))
    assert not isinstance(caught.value, ConnectFailed | TransportTimeout)
    await transport.close()


async def test_a_deadline_that_passes_while_connecting_is_a_timeout_not_connect_failed(serve):
    """TimeoutError is an OSError: it once became ConnectFailed, so a request with a
    millisecond left answered 502 and marked a healthy replica unreachable."""
    server = await serve(lambda raw: ok(b"x"))
    transport = Http1Transport()
    with pytest.raises(TransportTimeout, match="timed out connecting"):
        await transport.send(call(server.url(), timeout_s=0.0))  # no idle connection yet
    assert (await transport.send(call(server.url()))).status == 200
    await transport.close()


async def test_a_port_nobody_listens_on_is_connect_failed():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()  # a port just released by its listener refuses connections
    transport = Http1Transport()
    with pytest.raises(ConnectFailed):
        await transport.send(call(f"http://127.0.0.1:{port}"))
    await transport.close()


async def test_a_connection_idle_past_keepalive_is_replaced(serve):
    now = [0.0]
    server = await serve(lambda raw: ok(b"x"))
    transport = Http1Transport(keepalive_s=30.0, clock=lambda: now[0])
    await transport.send(call(server.url()))
    now[0] = 29.0
    await transport.send(call(server.url()))
    assert server.connections == 1
    now[0] = 60.0
    await transport.send(call(server.url()))
    assert server.connections == 2
    await transport.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    init(folder, days=7, ca_days=30, force=True)
    return folder


def tls(certs: Path, role: str) -> TlsSettings:
    return TlsSettings(ca=certs / "ca.crt", cert=certs / f"{role}.crt", key=certs / f"{role}.key")


async def test_mutual_tls_by_the_workers_name_and_a_new_context_makes_new_connections(serve, certs):
    server = await serve(lambda raw: ok(b"secure"), internal_server(tls(certs, "worker")))
    source = internal_client(tls(certs, "gateway"))
    assert source is not None
    first = FixedContext(source.current())
    transport = Http1Transport(first, server_hostname=WORKER_NAME)
    assert (await transport.send(call(server.url("https")))).body == b"secure"
    await transport.send(call(server.url("https")))
    assert server.connections == 1
    first.context = internal_client(tls(certs, "gateway")).current()  # type: ignore[union-attr]
    await transport.send(call(server.url("https")))
    assert server.connections == 2
    await transport.close()


async def test_a_worker_certificate_for_another_name_is_refused(serve, certs):
    server = await serve(lambda raw: ok(b""), internal_server(tls(certs, "worker")))
    source = internal_client(tls(certs, "gateway"))
    transport = Http1Transport(source, server_hostname="someone-else.headway.internal")
    with pytest.raises(ConnectFailed):
        await transport.send(call(server.url("https")))
    await transport.close()
