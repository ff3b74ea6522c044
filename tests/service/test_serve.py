"""A client listener and an operations listener in one process and event loop
(``serve.py``), on loopback sockets: each serves its own app under its own guard and caps,
both stop together, and an operations listener that fails stops the process's serving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from headway.http.asgi import App, Request, Response, json_response
from headway.http.edge import Edge
from headway.http.guard import measured_guard
from headway.http.router import Route, Router
from headway.serve import (
    DrainingServer,
    OpsListener,
    SideServer,
    client_config,
    listening_socket,
    ops_config,
    serve_beside,
)
from headway.settings import EdgeLimits

WAIT_S = 10.0  # deadline for a condition that should come far sooner
TWO_PER_CLIENT = EdgeLimits(max_connections_per_client=2)


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def status_of(port: int, path: str) -> int:
    """One GET on a new connection; the answer's status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        line = await asyncio.wait_for(reader.readline(), WAIT_S)
        return int(line.split()[1])
    finally:
        writer.close()
        await writer.wait_closed()


def edge_of(path: str) -> Edge:
    """An edge with one route, ``GET path``."""

    async def answer(request: Request) -> Response:
        return json_response({"path": path})

    return Edge(Router([Route("GET", path, path.strip("/"), answer)]), max_body_bytes=1024)


@dataclass
class Both:
    port: int
    ops_port: int
    main: DrainingServer
    side: SideServer
    task: asyncio.Task[None]
    lifespan: list[str] = field(default_factory=list)


@asynccontextmanager
async def both_listening(ops_sock_closed: bool = False) -> AsyncIterator[Both]:
    lifespan: list[str] = []

    async def started() -> None:
        lifespan.append("started")

    async def stopped() -> None:
        lifespan.append("stopped")

    client_app = App(edge_of("/v1/hello"), on_startup=[started], on_shutdown=[stopped])
    sock, ops_sock = listening_socket("127.0.0.1", 0), listening_socket("127.0.0.1", 0)
    port, ops_port = sock.getsockname()[1], ops_sock.getsockname()[1]
    if ops_sock_closed:
        ops_sock.close()
    guard = measured_guard(TWO_PER_CLIENT, None)
    ops = OpsListener(App(edge_of("/metrics")), "127.0.0.1", 0, edge=TWO_PER_CLIENT)
    main = DrainingServer(client_config(client_app, guard, "warning"), None, 0.0)
    side = SideServer(ops_config(ops, guard, "warning"))
    task = asyncio.create_task(serve_beside(main, sock, side, ops_sock))
    both = Both(port, ops_port, main, side, task, lifespan)
    try:
        yield both
    finally:
        main.should_exit = True
        await asyncio.wait([task], timeout=WAIT_S)
        assert task.done(), "serve_beside did not return once told to exit"


async def test_each_listener_serves_its_own_app_and_both_stop_together() -> None:
    async with both_listening() as both:
        await until(lambda: both.main.started and both.side.started, "both listening")
        assert both.lifespan == ["started"]
        assert await status_of(both.port, "/v1/hello") == 200
        assert await status_of(both.port, "/metrics") == 404
        assert await status_of(both.ops_port, "/metrics") == 200
        assert await status_of(both.ops_port, "/v1/hello") == 404
    both.task.result()  # returned, not raised
    assert both.lifespan == ["started", "stopped"]  # the client app's lifespan, once
    for port in (both.port, both.ops_port):
        with pytest.raises(ConnectionRefusedError):
            await status_of(port, "/metrics")


async def test_a_flooded_client_port_leaves_the_operations_port_its_own_slots() -> None:
    async with both_listening() as both:
        await until(lambda: both.main.started and both.side.started, "both listening")
        held = [await asyncio.open_connection("127.0.0.1", both.port) for _ in range(2)]
        try:
            assert await status_of(both.port, "/v1/hello") == 503  # over the per-client cap
            assert await status_of(both.ops_port, "/metrics") == 200  # the same address
        finally:
            for _, writer in held:
                writer.close()
                await writer.wait_closed()


async def test_an_operations_listener_that_fails_stops_the_client_listener_too() -> None:
    async with both_listening(ops_sock_closed=True) as both:
        await asyncio.wait([both.task], timeout=WAIT_S)
        assert both.task.done() and both.main.should_exit
        assert isinstance(both.task.exception(), OSError)
        assert both.lifespan == ["started", "stopped"]
