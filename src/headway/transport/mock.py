"""``MockTransport(handler)``: a function answers every call, as httpx's MockTransport does.

The handler gets the ``UpstreamRequest`` and returns a ``Reply`` (or an awaitable of
one), or raises a ``TransportError`` to stand for a replica that cannot be reached.
Every request is kept in ``requests``, in the order sent (unless ``keep=False``: a
benchmark's replica, answering millions).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from headway.transport.base import Reply, UpstreamRequest

Handler = Callable[[UpstreamRequest], Reply | Awaitable[Reply]]


class MockTransport:
    def __init__(self, handler: Handler, *, keep: bool = True) -> None:
        self.handler = handler
        self.requests: list[UpstreamRequest] = []
        self._keep = keep

    async def send(self, request: UpstreamRequest) -> Reply:
        if self._keep:
            self.requests.append(request)
        reply = self.handler(request)
        if inspect.isawaitable(reply):
            return await reply
        return reply

    async def close(self) -> None:
        pass
