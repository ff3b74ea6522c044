"""The edge: every request answered, every answer counted, nothing leaked."""

import asyncio
import logging

import msgspec
import pytest

from headway.errors import HeadwayError, Overloaded
from headway.http.asgi import (
    DISCONNECT_EXTENSION,
    App,
    Disconnect,
    Request,
    Response,
    body_chunks,
    error_response,
    json_response,
)
from headway.http.edge import Edge
from headway.http.router import Route, Router
from headway.logs import RequestFields


class Answers:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str | None]] = []

    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        assert seconds >= 0
        self.seen.append((route, status, error))


def app_of(*routes: Route, max_body_bytes: int = 1 << 20) -> tuple[App, Answers]:
    answers = Answers()
    return App(Edge(Router(routes), max_body_bytes=max_body_bytes, observer=answers)), answers


def scope(method="POST", path="/work", headers=()):
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


def whole_body(body: bytes = b"{}"):
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def call(app, receive=None, s=None):
    sent = []

    async def send(message):
        sent.append(message)

    await app(s or scope(), receive or whole_body(), send)
    return sent


def answer(sent) -> tuple[int, dict[str, str], dict]:
    start, body = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, msgspec.json.decode(body["body"])


async def ok(request: Request) -> Response:
    return json_response({"ok": True})


async def test_a_client_that_disconnects_cancels_its_handler_and_is_counted():
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def slow(request: Request) -> Response:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return json_response({})

    app, answers = app_of(Route("POST", "/work", "work", slow))
    messages = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

    async def receive():
        message = next(messages, None)
        if message is not None:
            return message
        await started.wait()
        return {"type": "http.disconnect"}

    sent = await asyncio.wait_for(call(app, receive), 5)
    assert cancelled.is_set()
    assert sent == []  # nobody is left to answer
    assert answers.seen == [("work", 499, "client_disconnected")]


async def test_under_a_server_that_cancels_on_disconnect_a_marked_cancel_is_a_499():
    started = asyncio.Event()

    async def slow(request: Request) -> Response:
        started.set()
        await asyncio.Event().wait()
        return json_response({})

    app, answers = app_of(Route("POST", "/work", "work", slow))
    disconnect = Disconnect()
    marked = scope() | {"extensions": {DISCONNECT_EXTENSION: disconnect}}
    task = asyncio.ensure_future(call(app, s=marked))
    await started.wait()
    disconnect.happened = True  # as the server does, then it cancels the task
    task.cancel()
    assert await task == []
    assert answers.seen == [("work", 499, "client_disconnected")]


async def test_a_cancel_the_server_did_not_mark_stays_a_cancel():
    started = asyncio.Event()

    async def slow(request: Request) -> Response:
        started.set()
        await asyncio.Event().wait()
        return json_response({})

    app, _ = app_of(Route("POST", "/work", "work", slow))
    marked = scope() | {"extensions": {DISCONNECT_EXTENSION: Disconnect()}}
    task = asyncio.ensure_future(call(app, s=marked))
    await started.wait()
    task.cancel()  # a shutdown, say: not the client
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_unexpected_errors_become_a_bare_500_with_a_request_id_and_a_log_line(caplog):
    async def broken(request: Request) -> Response:
        raise RuntimeError("secret input text")

    app, answers = app_of(Route("POST", "/work", "work", broken))
    caplog.handler.addFilter(RequestFields())  # as configure_logging's handler has
    with caplog.at_level(logging.ERROR, logger="headway.http.edge"):
        status, headers, body = answer(await call(app))
    assert status == 500
    assert body == {"error": {"type": "internal_error", "message": "internal error"}}
    assert "secret" not in str(body)
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert caplog.records[0].request_id == headers["x-request-id"]
    assert caplog.records[0].route == "work"
    assert caplog.records[0].trace_id == headers["traceresponse"].split("-")[1]
    assert answers.seen == [("work", 500, "internal_error")]


async def test_our_errors_go_through_the_table_with_retry_after_and_the_handlers_headers():
    async def busy(request: Request) -> Response:
        request.response_headers["x-ratelimit-remaining"] = "7"
        raise Overloaded("pool is full", retry_after_s=2.2)

    app, answers = app_of(Route("POST", "/work", "work", busy))
    status, headers, body = answer(await call(app))
    assert status == 503
    assert headers["retry-after"] == "3"
    assert headers["x-ratelimit-remaining"] == "7"
    assert body == {"error": {"type": "overloaded", "message": "pool is full"}}
    assert answers.seen == [("work", 503, "overloaded")]


async def test_a_route_with_its_own_error_format_writes_every_error_its_way():
    def plain(exc: HeadwayError) -> Response:
        return error_response(exc, {"error": exc.message, "kind": exc.type})

    async def busy(request: Request) -> Response:
        raise Overloaded("pool is full", retry_after_s=2.2)

    async def broken(request: Request) -> Response:
        raise RuntimeError("secret input text")

    app, answers = app_of(
        Route("POST", "/work", "work", busy, render_error=plain),
        Route("POST", "/bug", "bug", broken, render_error=plain),
    )
    status, headers, body = answer(await call(app))
    assert (status, headers["retry-after"]) == (503, "3")
    assert body == {"error": "pool is full", "kind": "overloaded"}
    status, _, body = answer(await call(app, s=scope(path="/bug")))
    assert (status, body) == (500, {"error": "internal error", "kind": "internal_error"})
    status, _, body = answer(await call(app, s=scope(path="/nowhere")))  # no route: the table's
    assert (status, body["error"]["type"]) == (404, "not_found")
    assert answers.seen == [
        ("work", 503, "overloaded"),
        ("bug", 500, "internal_error"),
        ("unmatched", 404, "not_found"),
    ]


async def test_unknown_paths_and_methods_are_answered_and_counted_with_bounded_labels():
    app, answers = app_of(Route("POST", "/work", "work", ok))
    status, _, body = answer(await call(app, s=scope(path="/no/such/thing")))
    assert (status, body["error"]["type"]) == (404, "not_found")
    status, headers, body = answer(await call(app, s=scope(method="GET")))
    assert (status, body["error"]["type"], headers["allow"]) == (405, "method_not_allowed", "POST")
    assert answers.seen == [("unmatched", 404, "not_found"), ("work", 405, "method_not_allowed")]


async def test_body_is_refused_as_soon_as_it_passes_the_limit_and_counted_under_its_route():
    app, answers = app_of(Route("POST", "/work", "work", ok), max_body_bytes=10)
    chunks = iter([b"123456", b"789012", b"never read"])

    async def receive():
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    status, _, body = answer(await call(app, receive))
    assert (status, body["error"]["type"]) == (413, "payload_too_large")
    assert next(chunks) == b"never read"
    assert answers.seen == [("work", 413, "payload_too_large")]


async def test_every_answer_carries_its_own_request_id():
    app, answers = app_of(Route("POST", "/work", "work", ok))
    ids = set()
    for _ in range(3):
        status, headers, _ = answer(await call(app))
        assert status == 200
        ids.add(headers["x-request-id"])
    assert len(ids) == 3 and all(len(i) == 32 for i in ids)
    assert answers.seen == [("work", 200, None)] * 3


async def test_a_streaming_route_reads_its_own_body_and_the_edge_reads_none():
    seen: list[bytes] = []

    async def streamed(request: Request) -> Response:
        assert request.body == b""  # the edge left the body to the handler
        async for chunk in body_chunks(request):
            seen.append(chunk)
        return json_response({"chunks": len(seen)})

    app, answers = app_of(
        Route("POST", "/work", "work", streamed, streams_body=True), max_body_bytes=4
    )
    chunks = iter([b"longer than", b"", b" the edge's limit"])
    reads = []

    async def receive():
        reads.append(1)
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.request", "body": chunk, "more_body": True}

    status, _, body = answer(await call(app, receive))
    # Every receive went to the handler: no watcher task took one (no empty chunk yielded).
    assert (status, body, seen) == (200, {"chunks": 2}, [b"longer than", b" the edge's limit"])
    assert len(reads) == 4 and answers.seen == [("work", 200, None)]


async def test_a_streaming_route_whose_client_leaves_is_a_499():
    async def streamed(request: Request) -> Response:
        async for _ in body_chunks(request):
            pass
        return json_response({})

    app, answers = app_of(Route("POST", "/work", "work", streamed, streams_body=True))
    messages = iter([{"type": "http.request", "body": b"x", "more_body": True}])

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    assert await call(app, receive) == []
    assert answers.seen == [("work", 499, "client_disconnected")]
