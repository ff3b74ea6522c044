"""The Batch API against hostile tenants and strangers: per-tenant bounds, streamed
uploads (bounded memory, nothing kept on a refusal or a disconnect), caps on uploads at
once, streamed downloads, and client input that must never be a 5xx.

Most tests drive the gateway's ASGI app directly (``Upload``), so they can hold a body
mid-way, disconnect, or count how much of a body was read before the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import tracemalloc
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from headway.batches.filestore import PARTIAL_DIR
from headway.http.asgi import DISCONNECT_EXTENSION, App, Disconnect
from tests.service.batch_helpers import BATCHES, create, embed_line, jsonl, upload
from tests.service.conftest import Stack, auth, make_stack

VICTIM = "demo-key-support-bot"
BOUNDARY = "hwTestBoundary"


@dataclass
class Upload:
    """One POST /v1/files through the raw ASGI app: the body from ``chunks``, optionally
    held before a chunk (``hold_at``, released by ``release``) or ended by a disconnect
    (``disconnect_at``); what was read of it and what came back."""

    key: str = "demo-key-search-app"
    chunks: Iterable[bytes] = ()
    hold_at: int | None = None
    disconnect_at: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)
    reads: int = 0
    """``receive`` calls the app made."""
    status: int = 0
    body: bytes = b""
    response_headers: dict[str, str] = field(default_factory=dict)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, app: App) -> Upload:
        pieces = iter(self.chunks)
        sent: list[dict[str, Any]] = []
        headers = {
            "authorization": f"Bearer {self.key}",
            "content-type": f"multipart/form-data; boundary={BOUNDARY}",
        } | self.headers
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/files",
            "raw_path": b"/v1/files",
            "query_string": b"",
            "root_path": "",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            "server": ("gateway", 80),
            "client": ("127.0.0.1", 5000),
            "extensions": self.extensions,
        }

        async def receive() -> dict[str, Any]:
            number = self.reads
            self.reads += 1
            if number == self.hold_at:
                self.held.set()
                await self.release.wait()
            if number == self.disconnect_at:
                return {"type": "http.disconnect"}
            chunk = next(pieces, None)
            if chunk is None:
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.request", "body": chunk, "more_body": True}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        if sent:
            self.status = sent[0]["status"]
            self.response_headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
            self.body = b"".join(m.get("body", b"") for m in sent[1:])
        return self

    def error(self) -> dict[str, str]:
        return msgspec.json.decode(self.body)["error"]


def form(file_chunks: Iterable[bytes], purpose: bytes = b"batch") -> Iterable[bytes]:
    """A multipart body, the file's bytes in the chunks given."""
    yield (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'.encode()
        + purpose
        + f"\r\n--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        "Content-Type: application/jsonl\r\n\r\n".encode()
    )
    yield from file_chunks
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


def big_file(total_bytes: int, chunk: int = 64 << 10) -> Iterable[bytes]:
    """Good request lines of about 2 KB, ``total_bytes`` in all, made as they are sent."""
    text = "x" * 180
    line_of = '{{"custom_id": "r-{:07d}", "method": "POST", "url": "/v1/embeddings", ' + (
        '"body": {{"model": "synthetic", "input": [' + ", ".join([f'"{text}"'] * 10) + "]}}}}\n"
    )
    buffer = bytearray()
    made = number = 0
    while made < total_bytes:
        line = line_of.format(number).encode()
        number += 1
        buffer += line
        made += len(line)
        while len(buffer) >= chunk:
            yield bytes(buffer[:chunk])
            del buffer[:chunk]
    if buffer:
        yield bytes(buffer)


async def download(app: App, file_id: str) -> list[dict[str, Any]]:
    """GET /v1/files/{file_id}/content through the raw ASGI app: the messages sent."""
    sent: list[dict[str, Any]] = []
    asked = []

    async def receive() -> dict[str, Any]:
        asked.append(1)
        if len(asked) > 1:  # as a server does: nothing more until the client leaves
            await asyncio.Event().wait()
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": f"/v1/files/{file_id}/content",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer demo-key-search-app")],
    }
    await app(scope, receive, send)
    return sent


def leftovers(stack: Stack) -> list[Path]:
    """Temporary files in the file store (an upload's that was not kept)."""
    assert stack.batches is not None
    partial = stack.batches.files.root / PARTIAL_DIR  # type: ignore[attr-defined]
    return sorted(partial.iterdir()) if partial.exists() else []


async def listed(stack: Stack, key: str = "demo-key-search-app") -> list[str]:
    answer = await stack.client.get("/v1/files", headers=auth(key))
    return [f["id"] for f in answer.json()["data"]]


async def until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come true in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(
        tmp_path,
        batches=BATCHES.model_copy(
            update={
                "max_files_per_tenant": 3,
                "max_stored_bytes_per_tenant": 4000,
                "max_open_batches_per_tenant": 2,
                "max_uploads_per_tenant": 2,
                "max_uploads": 3,
            }
        ),
    )
    yield built
    await built.close()


ONE_LINE = jsonl(embed_line("a", "one"))


# Per-tenant bounds: one tenant at its limit, the other unaffected


async def test_a_tenant_at_its_file_limit_is_refused_and_another_is_not(stack):
    for _ in range(3):
        assert (await upload(stack.client, ONE_LINE, auth())).status_code == 200
    refused = await upload(stack.client, ONE_LINE, auth())
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "storage_limit_reached"
    assert "keeps 3 files; its limit is 3 (max_files)" in error["message"]
    assert len(await listed(stack)) == 3 and leftovers(stack) == []
    assert (await upload(stack.client, ONE_LINE, auth(VICTIM))).status_code == 200
    # Deleting one frees a slot.
    await stack.client.delete(f"/v1/files/{(await listed(stack))[0]}", headers=auth())
    assert (await upload(stack.client, ONE_LINE, auth())).status_code == 200


async def test_stored_bytes_are_refused_at_the_first_chunk_past_the_tenants_room(stack):
    first = jsonl(*[embed_line(f"a{i}", "t" * 100) for i in range(12)])
    assert 2000 < len(first) < 4000
    assert (await upload(stack.client, first, auth())).status_code == 200
    chunks = [jsonl(embed_line(f"b{i}", "t" * 100)) for i in range(40)]
    refused = await Upload(chunks=form(chunks)).run(stack.gateway_app)
    assert refused.status, "no answer"
    assert refused.status == 400 and refused.error()["type"] == "storage_limit_reached"
    assert f"keeps {len(first)} bytes of files" in refused.error()["message"]
    assert "(max_stored_bytes)" in refused.error()["message"]
    room = 4000 - len(first)
    # Refused at the chunk that passed the room, not after the whole body.
    assert refused.reads <= 2 + room // len(chunks[0]) + 1 < len(chunks)
    assert leftovers(stack) == [] and len(await listed(stack)) == 1
    assert (await upload(stack.client, first, auth(VICTIM))).status_code == 200


async def test_a_tenant_at_its_open_batches_is_429_with_retry_after_and_another_is_not(stack):
    file = (await upload(stack.client, ONE_LINE, auth())).json()
    ids = [(await create(stack.client, file["id"], auth())).json()["id"] for _ in range(2)]
    refused = await create(stack.client, file["id"], auth())
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "60"
    error = refused.json()["error"]
    assert error["type"] == "limit_reached"
    assert "has 2 batches not yet finished; its limit is 2 (max_open_batches)" in error["message"]
    other = (await upload(stack.client, ONE_LINE, auth(VICTIM))).json()
    assert (await create(stack.client, other["id"], auth(VICTIM))).status_code == 200
    # A finished batch no longer counts; a cancelling one still does.
    assert stack.batches is not None
    stack.batches.store.move(ids[0], ("validating",), "failed", 1)
    assert (await create(stack.client, file["id"], auth())).status_code == 200
    await stack.client.post(f"/v1/batches/{ids[1]}/cancel", headers=auth())
    assert (await create(stack.client, file["id"], auth())).status_code == 429


async def test_a_tenants_own_rule_overrides_the_setting_and_can_go_back(stack):
    stack.registry.update_tenant("search-app", batch_limits={"max_files": 1})
    await stack.gateway.snapshots.refresh()
    assert (await upload(stack.client, ONE_LINE, auth())).status_code == 200
    refused = await upload(stack.client, ONE_LINE, auth())
    assert "its limit is 1 (max_files)" in refused.json()["error"]["message"]
    assert (await upload(stack.client, ONE_LINE, auth(VICTIM))).status_code == 200
    stack.registry.update_tenant("search-app", batch_limits={"max_files": None})
    await stack.gateway.snapshots.refresh()
    assert (await upload(stack.client, ONE_LINE, auth())).status_code == 200


async def test_two_uploads_racing_for_the_last_slot_do_not_both_pass(stack):
    for _ in range(2):
        assert (await upload(stack.client, ONE_LINE, auth())).status_code == 200
    # Both pass the check before the body (2 files of 3); only one may be recorded.
    racers = [Upload(chunks=form([ONE_LINE]), hold_at=0) for _ in range(2)]
    running = [asyncio.ensure_future(racer.run(stack.gateway_app)) for racer in racers]
    await until(lambda: all(racer.held.is_set() for racer in racers))
    for racer in racers:
        racer.release.set()
    await asyncio.gather(*running)
    assert sorted(racer.status for racer in racers) == [200, 400]
    assert len(await listed(stack)) == 3 and leftovers(stack) == []


# Uploads at once: per tenant, per gateway


async def test_uploads_at_once_are_capped_per_tenant_then_per_gateway(stack):
    held = [Upload(chunks=form([ONE_LINE]), hold_at=0) for _ in range(2)]
    running = [asyncio.ensure_future(h.run(stack.gateway_app)) for h in held]
    await until(lambda: all(h.held.is_set() for h in held))
    third = await Upload(chunks=form([ONE_LINE])).run(stack.gateway_app)
    assert third.status == 429 and third.response_headers["retry-after"] == "5"
    assert "has 2 uploads in progress on this gateway; the limit is 2" in third.error()["message"]
    assert third.reads == 0  # refused before any byte of its body was read
    other = Upload(key=VICTIM, chunks=form([ONE_LINE]), hold_at=0)
    running.append(asyncio.ensure_future(other.run(stack.gateway_app)))
    await until(other.held.is_set)
    fourth = await Upload(key="demo-key-nightly-index", chunks=form([ONE_LINE])).run(
        stack.gateway_app
    )
    assert fourth.status == 429
    assert "this gateway has 3 uploads in progress; the limit is 3" in fourth.error()["message"]
    for h in [*held, other]:
        h.release.set()
    await asyncio.gather(*running)
    assert [h.status for h in [*held, other]] == [200, 200, 200]
    again = await Upload(chunks=form([ONE_LINE])).run(stack.gateway_app)  # slots given back
    assert again.status == 200, again.body


# What a stranger or a hostile body costs, and what is left of it


async def test_a_stranger_is_refused_after_its_headers_without_its_body_read(stack):
    for key in ("wrong-key", ""):
        stranger = await Upload(key=key, chunks=big_file(150 << 20)).run(stack.gateway_app)
        assert stranger.status == 401 and stranger.reads == 0
    admin = await Upload(key="demo-admin-key", chunks=big_file(1 << 20)).run(stack.gateway_app)
    assert admin.status == 403 and admin.reads == 0


async def test_a_declared_length_past_the_limit_is_413_before_the_body(stack):
    too_long = str(BATCHES.max_file_bytes + (64 << 10) + 1)
    refused = await Upload(chunks=big_file(1 << 20), headers={"content-length": too_long}).run(
        stack.gateway_app
    )
    assert refused.status == 413 and refused.reads == 0


async def test_the_file_limit_is_413_at_the_first_chunk_past_it(tmp_path):
    stack = await make_stack(tmp_path, batches=BATCHES.model_copy(update={"max_file_bytes": 5000}))
    try:
        chunks = [jsonl(embed_line(f"b{i}", "t" * 100)) for i in range(100)]
        refused = await Upload(chunks=form(chunks)).run(stack.gateway_app)
        assert refused.status == 413, refused.body
        assert "the file has more than 5000 bytes" in refused.error()["message"]
        assert refused.reads <= 2 + 5000 // len(chunks[0]) + 1
        assert leftovers(stack) == [] and await listed(stack) == []
    finally:
        await stack.close()


async def test_a_client_that_disconnects_mid_upload_leaves_nothing(tmp_path):
    stack = await make_stack(
        tmp_path, batches=BATCHES.model_copy(update={"max_uploads_per_tenant": 2})
    )
    try:
        gone = Upload(chunks=form(big_file(4 << 20, chunk=16 << 10)), disconnect_at=100)
        await gone.run(stack.gateway_app)
        assert gone.status == 0 and gone.reads == 101  # nobody to answer
        assert leftovers(stack) == [] and await listed(stack) == []
        # Its slot was given back: two more at once still fit the tenant's two.
        held = [Upload(chunks=form([ONE_LINE]), hold_at=1) for _ in range(2)]
        running = [asyncio.ensure_future(h.run(stack.gateway_app)) for h in held]
        await until(lambda: all(h.held.is_set() for h in held))
        for h in held:
            h.release.set()
        assert [u.status for u in await asyncio.gather(*running)] == [200, 200]
    finally:
        await stack.close()


async def test_an_upload_cancelled_by_the_server_on_disconnect_leaves_nothing(tmp_path):
    # headway's own server cancels the request's task when its client goes (guard.py).
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        marked = Disconnect()
        gone = Upload(
            chunks=form(big_file(4 << 20, chunk=16 << 10)),
            hold_at=60,
            extensions={DISCONNECT_EXTENSION: marked},
        )
        task = asyncio.ensure_future(gone.run(stack.gateway_app))
        await until(gone.held.is_set)
        assert leftovers(stack) != []  # the file was being written
        marked.happened = True
        task.cancel()
        await task  # the app swallows the disconnect: nobody to answer
        assert gone.status == 0
        assert leftovers(stack) == [] and await listed(stack) == []
    finally:
        await stack.close()


async def test_a_bad_line_mid_file_refuses_the_upload_at_once_and_keeps_nothing(stack):
    good = [jsonl(embed_line(f"g{i}", "t")) for i in range(5)]
    deep = b'{"custom_id": "d", "method": "POST", "url": "/v1/rerank", "body": {"query": "q", '
    deep += b'"documents": [{"text": "secret", "x": ' + b"[" * 990 + b"]" * 990 + b"}]}}\n"
    refused = await Upload(chunks=form([*good, deep, *good])).run(stack.gateway_app)
    assert refused.status == 400
    message = refused.error()["message"]
    assert (
        message.startswith("line 6 nests JSON more than 64 levels deep") and "secret" not in message
    )
    assert leftovers(stack) == [] and await listed(stack) == []


async def test_the_upload_refuses_what_the_executors_parser_would_fail_on(stack):
    nested = b"[" * 1000 + b"]" * 1000
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"model": '
    line += b'"m", "input": ["t"], "user": ' + nested + b"}}\n"
    refused = await upload(stack.client, line, auth())
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith("line 1 nests JSON more than 64")
    # A line the executor reads as a per-line error (its body breaks a limit) still uploads.
    wrong = jsonl(embed_line("a", "x" * 500))  # over max_chars: an error line at validation
    assert (await upload(stack.client, wrong, auth())).status_code == 200


async def test_a_wrong_purpose_before_the_file_is_refused_before_the_file_streams(stack):
    refused = await Upload(chunks=form(big_file(8 << 20), purpose=b"fine-tune")).run(
        stack.gateway_app
    )
    assert refused.status == 422 and "'batch'" in refused.error()["message"]
    assert refused.reads <= 2 and leftovers(stack) == []


async def test_memory_stays_bounded_whatever_the_uploads_size(tmp_path):
    size = 12 << 20
    sent = hashlib.sha256()

    def hashed(chunks: Iterable[bytes]) -> Iterable[bytes]:
        for chunk in chunks:
            sent.update(chunk)
            yield chunk

    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            done = await Upload(chunks=form(hashed(big_file(size)))).run(stack.gateway_app)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert done.status == 200, done.body
        file = msgspec.json.decode(done.body)
        assert stack.batches is not None
        record = stack.batches.store.file(stack.registry.tenant("search-app").id, file["id"])
        assert record is not None and record.bytes >= size and record.lines > 5_000
        assert record.sha256 == sent.hexdigest()
        # What is held is the chunk in hand and a quarter megabyte gathered for the disk.
        assert peak < 3 << 20, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB upload"
        # The download is sent from the file, a megabyte at a time, and is the same bytes.
        messages = await download(stack.gateway_app, file["id"])
        bodies = [m["body"] for m in messages if m["type"] == "http.response.body"]
        assert messages[0]["status"] == 200 and len(bodies) == -(-record.bytes // (1 << 20))
        assert hashlib.sha256(b"".join(bodies)).hexdigest() == sent.hexdigest()
    finally:
        await stack.close()


# Client input that must be a 4xx, never a 5xx


@pytest.mark.parametrize(
    "query",
    [
        "limit=" + "9" * 5000,
        "limit=%C2%B2",
        "limit=%D9%A3",
        "limit=0",
        "limit=-1",
        "limit=+5",
        "limit=1e3",
        "limit=%201",
        "limit=" + "0" * 5000 + "7x",
    ],
)
@pytest.mark.parametrize("path", ["/v1/files", "/v1/batches"])
async def test_a_strange_limit_is_422_not_500(stack, path, query):
    answer = await stack.client.get(f"{path}?{query}", headers=auth())
    assert answer.status_code == 422, answer.text
    assert "limit must be a whole number from 1 to" in answer.json()["error"]["message"]


async def test_a_limit_with_leading_zeros_is_a_number(stack):
    answer = await stack.client.get("/v1/batches?limit=" + "0" * 5000 + "7", headers=auth())
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("seconds", ["²", "٣٦٠٠", "9" * 1000, "-3600", "3600.0", " ", ""])
async def test_a_strange_expiry_is_422_not_500(stack, seconds):
    answer = await stack.client.post(
        "/v1/files",
        headers=auth(),
        data={"purpose": "batch", "expires_after[seconds]": seconds},
        files={"file": ("a.jsonl", ONE_LINE)},
    )
    assert answer.status_code == 422, answer.text
    assert "expires_after[seconds] must be a whole number" in answer.json()["error"]["message"]
    assert leftovers(stack) == []


async def test_a_huge_plain_field_is_refused_without_being_held(stack):
    body = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'.encode(),
        *([b"b" * 4096] * 100),
    ]
    refused = await Upload(chunks=body).run(stack.gateway_app)
    assert refused.status == 422 and "more than 1024 bytes" in refused.error()["message"]
    assert refused.reads <= 3
