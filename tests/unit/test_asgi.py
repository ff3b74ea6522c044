import asyncio

from headway.http.asgi import App, Request, Response, Router, json_response


def scope(method="POST", path="/work", headers=()):
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


async def call(app, receive, s=None):
    sent = []

    async def send(message):
        sent.append(message)

    await app(s or scope(), receive, send)
    return sent


async def test_a_client_that_disconnects_cancels_its_handler():
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

    router = Router()
    router.add("POST", "/work", slow)
    app = App(router, watch_disconnect=True)
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


async def test_unexpected_errors_become_a_bare_500_without_detail():
    async def broken(request: Request) -> Response:
        raise RuntimeError("secret input text")

    router = Router()
    router.add("POST", "/work", broken)
    app = App(router)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    start, body = await call(app, receive)
    assert start["status"] == 500
    assert b"secret" not in body["body"]
    assert b'"internal_error"' in body["body"]


async def test_body_is_refused_as_soon_as_it_passes_the_limit():
    async def echo(request: Request) -> Response:
        return json_response({"size": len(request.body)})

    router = Router()
    router.add("POST", "/work", echo)
    app = App(router, max_body_bytes=10)
    chunks = iter([b"123456", b"789012", b"never read"])

    async def receive():
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    start, _ = await call(app, receive)
    assert start["status"] == 413
    assert next(chunks) == b"never read"
