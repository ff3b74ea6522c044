"""The edge refuses before it reads, and failed keys are throttled on every route that takes
one: the gateway app in process (and, where the bytes on the wire are the proof, behind the
guarded protocol on a loopback socket), playing the anonymous client and the guesser."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from uvicorn.server import ServerState

from headway.control.console.routes import CONSOLE_SESSION
from headway.http.asgi import App
from headway.http.guard import EdgeGuard, guarded_protocol
from headway.models.store import ModelStore
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.serve import listening_socket
from headway.settings import BatchSettings, EdgeLimits, FailedAuthSettings
from tests.service.conftest import auth, make_stack

WAIT_S = 10.0
TENANT = "demo-key-search-app"
EXECUTOR = "executor-token-for-tests"
WEIGHTS = "weights-token-for-tests"
FEW = FailedAuthSettings(address_failures=3, address_window_s=60, key_prefix_failures=50)
PUBLIC = {
    "healthz",
    "readyz",
    "openapi",
    "console_login_form",
    "console_login",
    "console_logout",
    "console_static",
}
"""The routes anyone may call: every other one declares how its caller is identified."""


@asynccontextmanager
async def on_loopback(app: App, limits: EdgeLimits) -> AsyncIterator[int]:
    """``app`` behind the guarded protocol on a loopback port, in this loop: the port."""
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False, ws="none")
    config.load()
    state = ServerState()
    protocol = guarded_protocol(EdgeGuard(limits))
    sock = listening_socket("127.0.0.1", 0)
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), sock=sock
    )
    try:
        yield sock.getsockname()[1]
    finally:
        server.close()
        for connection in list(state.connections):
            connection.transport.close()
        await server.wait_closed()


def answer_of(raw: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


async def upload_head_then(port: int, key: str, declared: int, sent: int) -> tuple[bytes, int]:
    """A POST /v1/files declaring ``declared`` body bytes, of which ``sent`` go with the
    headers; then the client only reads. What it read, and what it had sent of the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /v1/files HTTP/1.1\r\nHost: gateway\r\n"
        f"authorization: Bearer {key}\r\n"
        "content-type: multipart/form-data; boundary=xyz\r\n"
        f"content-length: {declared}\r\n\r\n"
    ).encode()
    writer.write(head + b"x" * sent)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), WAIT_S), sent
    finally:
        writer.close()


async def test_a_strangers_upload_is_refused_after_its_headers(tmp_path):
    stack = await make_stack(tmp_path, batches=BatchSettings())
    try:
        async with on_loopback(stack.gateway_app, EdgeLimits()) as port:
            declared = 150 << 20  # 150 MB, under the upload limit
            raw, sent = await upload_head_then(port, "hw_not-a-key", declared, 64 << 10)
            status, headers, body = answer_of(raw)
            assert status == 401 and body["error"]["type"] == "unauthorized"
            assert headers["connection"] == "close"  # the rest of it is never read
            assert sent / declared < 0.001  # the answer came with 0.04% of the body sent
            # A tenant declaring more than the limit: 413 at once, nothing of it read.
            raw, _ = await upload_head_then(port, TENANT, 300 << 20, 0)
            status, headers, body = answer_of(raw)
            assert (status, headers["connection"]) == (413, "close")
            assert "bytes" in body["error"]["message"]
    finally:
        await stack.close()


async def test_the_key_is_checked_before_the_media_type_and_both_before_the_body(stack):
    xml = {"content-type": "application/xml"}
    stranger = await stack.client.post("/v1/embeddings", content=b"<a/>", headers=xml)
    assert stranger.status_code == 401  # a stranger is told nothing else
    tenant = await stack.client.post("/v1/embeddings", content=b"<a/>", headers=xml | auth())
    assert tenant.status_code == 415
    assert "expected application/json" in tenant.json()["error"]["message"]


async def test_every_route_that_takes_a_key_declares_its_check(tmp_path):
    stack = await make_stack(tmp_path, batches=BatchSettings(executor_token=EXECUTOR))
    try:
        routes = stack.gateway_app.handler.router.routes()  # type: ignore[attr-defined]
        undeclared = {r.name for r in routes if r.auth is None}
        assert undeclared == PUBLIC
        document = (await stack.client.get("/openapi.json")).json()
        for route in routes:
            operation = document["paths"].get(route.path, {}).get(route.method.lower())
            if operation is not None:  # the console's are not in the document
                assert bool(operation["security"]) == (route.auth is not None), route.name
                if route.auth is not None:
                    assert "429" in operation["responses"], route.name
            else:
                assert route.auth in (None, CONSOLE_SESSION), route.name
    finally:
        await stack.close()


GUESSED = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/embeddings", {"model": "synthetic", "input": ["a"]}),
    ("GET", "/admin/tenants", None),
    ("GET", "/v1/weights/" + "0" * 64, None),
    ("POST", "/internal/batches/v1/embeddings", {"model": "synthetic", "input": ["a"]}),
    ("GET", "/v1/files", None),
]


async def test_guessed_keys_get_429_with_retry_after_on_every_route_that_takes_one(tmp_path):
    for method, path, body in GUESSED:
        stack = await make_stack(
            tmp_path / path.replace("/", "_"),
            batches=BatchSettings(executor_token=EXECUTOR),
            failed_auth=FEW,
            weights=(ModelStore(tmp_path / "models"), WEIGHTS),
        )
        client = stack.client
        try:
            statuses = []
            for number in range(5):
                wrong = {"authorization": f"Bearer hw_guess{number}"}
                answer = await client.request(method, path, headers=wrong, json=body)
                statuses.append(answer.status_code)
            assert statuses == [401, 401, 401, 429, 429], path
            assert int(answer.headers["retry-after"]) == 20  # one failure back every 60 / 3 s
            assert answer.json()["error"]["type"] == "too_many_failed_keys"
            assert "3 within 60 s" in answer.json()["error"]["message"]
            assert "hw_guess" not in answer.text
        finally:
            await client.aclose()
            await stack.close()


async def test_a_tenant_served_before_the_guessing_is_served_through_it(tmp_path):
    stack = await make_stack(tmp_path, failed_auth=FEW)
    body = {"model": "synthetic", "input": ["a"]}
    try:
        assert (await stack.client.post("/v1/embeddings", headers=auth(), json=body)).is_success
        for number in range(10):  # a guesser at the same address
            await stack.client.get("/v1/models", headers=auth(f"hw_guess{number}"))
        admin = await stack.client.get("/admin/tenants", headers=auth(DEMO_ADMIN_KEY))
        assert admin.status_code == 429  # a key never served from here: cannot be told apart
        for _ in range(5):
            served = await stack.client.post("/v1/embeddings", headers=auth(), json=body)
            assert served.status_code == 200
        transport = httpx.ASGITransport(app=stack.gateway_app, client=("10.0.0.9", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as other:
            assert (await other.get("/admin/tenants", headers=auth(DEMO_ADMIN_KEY))).is_success
        metrics = stack.gateway.metrics.registry
        assert metrics.get_sample_value("headway_auth_failures_total") == 3
        assert metrics.get_sample_value("headway_auth_refused_total", {"subject": "address"}) == 8
        assert metrics.get_sample_value("headway_auth_lockouts_total", {"subject": "address"}) == 1
    finally:
        await stack.close()


async def test_x_forwarded_for_counts_only_behind_a_trusted_proxy(tmp_path):
    async def guess_through(stack, forwarded: str) -> list[int]:
        transport = httpx.ASGITransport(app=stack.gateway_app, client=("10.0.0.5", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as proxy:
            return [
                (
                    await proxy.get(
                        "/v1/models",
                        headers=auth(f"hw_guess{n}") | {"x-forwarded-for": f"{forwarded}{n}"},
                    )
                ).status_code
                for n in range(4)
            ]

    trusting = await make_stack(
        tmp_path / "a", failed_auth=FEW, edge=EdgeLimits(trusted_proxies=("10.0.0.0/8",))
    )
    try:  # each guess from another client behind the proxy: none locked
        assert await guess_through(trusting, "198.51.100.") == [401, 401, 401, 401]
    finally:
        await trusting.close()
    spoofed = await make_stack(tmp_path / "b", failed_auth=FEW)
    try:  # the same headers from a peer nobody trusts: its own address is counted
        assert await guess_through(spoofed, "198.51.100.") == [401, 401, 401, 429]
    finally:
        await spoofed.close()
