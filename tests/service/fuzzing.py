"""The whole gateway in this process for a schema fuzzer: every route it serves (the Batch
API, the weights store, the console, the executor's line routes), the callers each route
knows, and a bridge that lets schemathesis call it as an ASGI app.

schemathesis calls an ASGI app from an event loop of its own, in a thread of its own; the
stack (gateway, workers, their background loops) lives on another loop, which this module
runs in a thread. ``LoopBridge`` is the app schemathesis calls: it reads the request's
body there, runs the request on the stack's loop, and replays the answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from headway.batches.store import BatchStore
from headway.billing.ledger.memory import MemoryLedger
from headway.gateway.lines.headers import BATCH_ID, KEY_ID, LINE, REQUEST_ID, TENANT_ID
from headway.http.asgi import App
from headway.models.store import ModelStore, StoredModel
from headway.registry.model import Actor
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import FailedAuthSettings
from tests.service.batch_helpers import BATCHES, TOKEN, live_line
from tests.service.conftest import Stack, make_stack
from tests.weights_builders import stored_artifact

T = TypeVar("T")

TENANT_NAME = "fuzzing-tenant-with-a-long-name"
"""Long, so that no name a fuzzer makes up for a path is this tenant's."""
TENANT_KEY = "fuzzing-tenant-key"
WEIGHTS_TOKEN = "fuzzing-weights-token"
UNLIMITED_FAILURES = FailedAuthSettings(address_failures=10**9, key_prefix_failures=10**9)
"""The fuzzer sends thousands of wrong keys from one address, the served caller's among
them: the failed-key limiter (tested on its own, tests/service/test_edge_auth.py) would
refuse them all after the twentieth."""
LINE_HEADERS = {TENANT_ID: "1", KEY_ID: "0" * 16, REQUEST_ID: "ab" * 16}
"""What the batch executor names on a line (a tenant's id, the batch's key, the line's id):
sent by callers who must be refused whatever it names."""
ANY_KEY = frozenset({"/v1/models", "/info"})
"""Routes that serve any valid key, the admin's too."""


class StackLoop:
    """An event loop in a thread of its own, for a stack that outlives one call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class LoopBridge:
    """An ASGI app that runs each HTTP request on ``loop``'s ``app``: the body is read
    whole first, and the answer is gathered and then sent. No lifespan: the stack was
    started by whoever built it."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop) -> None:
        self.app, self.loop = app, loop

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise RuntimeError("no lifespan here: the stack is started by its fixture")
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        answer = asyncio.run_coroutine_threadsafe(
            _answer(self.app, dict(scope), b"".join(chunks)), self.loop
        )
        for message in await asyncio.wrap_future(answer):
            await send(message)


async def _answer(app: App, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@dataclass
class Gateway:
    """The stack and the gateway app serving every route, with what identifies callers."""

    stack: Stack
    app: App
    client: httpx.AsyncClient
    model: StoredModel
    line: Mapping[str, str]
    """The claim headers of a line of a live batch of the fuzzing tenant: the executor's
    token serves only such a line (``gateway/lines/claims.py``)."""

    async def close(self) -> None:
        await self.stack.close()


async def full_gateway(
    tmp_path: Path, batch_store: Callable[[], BatchStore] | None = None
) -> Gateway:
    """A stack with the Batch API (and the executor's token), the weights store, the console
    and a tenant whose quota a fuzzer cannot use up; ``batch_store``: opens the Batch API's
    store (default: SQLite in ``tmp_path``)."""
    store = None if batch_store is None else batch_store()
    models = ModelStore(tmp_path / "models")
    model = stored_artifact(models, graph=bytes(range(256)) * 16)
    stack = await make_stack(
        tmp_path,
        batches=BATCHES,
        ledger=MemoryLedger(),
        batch_store=store,
        failed_auth=UNLIMITED_FAILURES,
        weights=(models, WEIGHTS_TOKEN),
    )
    stack.registry.add_tenant(
        TENANT_NAME,
        "interactive",
        actor=Actor("test", "fuzzing"),
        rate_texts_per_s=1e9,
        burst_texts=1e9,
        key=TENANT_KEY,
    )
    await stack.gateway.snapshots.refresh()
    app, client = stack.gateway_app, stack.client
    assert stack.batches is not None
    tenant_id = stack.registry.tenant(TENANT_NAME).id
    line = live_line(stack.batches.store, tenant_id, total=1)
    claim = {name: line[name] for name in (BATCH_ID, LINE, KEY_ID, REQUEST_ID)}
    return Gateway(stack, app, client, model, claim)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@dataclass(frozen=True)
class Callers:
    """Who calls a route: the callers it serves, and those it must refuse (the headers
    each sends)."""

    served: Mapping[str, Mapping[str, str]]
    refused: Mapping[str, Mapping[str, str]]


def callers(path: str, line: Mapping[str, str]) -> Callers:
    """The callers ``path`` serves, and the ones a hostile client would try there instead:
    another role's key, a credential of another route (the executor's token with a live
    line's claim, everywhere but its line routes), no key."""
    tenant, admin, anonymous = bearer(TENANT_KEY), bearer(DEMO_ADMIN_KEY), {}
    executor = bearer(TOKEN) | LINE_HEADERS | dict(line)
    if path.startswith("/internal/batches/"):
        return Callers(
            {"executor": bearer(TOKEN) | dict(line)},  # the tenant's id: the fuzzer's
            {"tenant": tenant | LINE_HEADERS | dict(line), "admin": admin, "anonymous": anonymous},
        )
    if path.startswith("/v1/weights/"):
        return Callers(
            {"worker": bearer(WEIGHTS_TOKEN), "admin": admin},
            {"tenant": tenant, "executor": bearer(TOKEN), "anonymous": anonymous},
        )
    if path.startswith("/admin/"):
        return Callers(
            {"admin": admin}, {"tenant": tenant, "executor": executor, "anonymous": anonymous}
        )
    if path in ANY_KEY:
        return Callers(
            {"tenant": tenant, "admin": admin}, {"executor": executor, "anonymous": anonymous}
        )
    return Callers(
        {"tenant": tenant}, {"admin": admin, "executor": executor, "anonymous": anonymous}
    )
