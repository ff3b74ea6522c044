"""The outermost layer: every request is answered, and every answer counted and timed.

``Edge`` sits around the router, as Starlette's ``ServerErrorMiddleware`` sits
outside all else. In order, for each request:

1. give it a request id (ours, never the client's);
2. find its route and its path parameters — an unknown path (404) or method (405) is an
   answer like any other;
3. read the body, refusing past ``max_body_bytes`` (413);
4. run the route's handler, cancelled if the client disconnects first;
5. turn what came out into the response: a ``HeadwayError`` through the one table in
   ``errors.py`` (JSON ``{"error": {"type", "message"}}``, ``Retry-After`` where it has
   one), anything else into a bare 500 ``internal_error`` and one log line with the
   request id and traceback, never the exception's text to the client (it may quote
   the input);
6. add the request id and the headers the handler set for every answer;
7. report it to the ``AnswerObserver``: route name, status, seconds, error type.

A client that disconnected gets nothing (nobody is listening) but is still
reported, with status 499 (nginx's "client closed request").
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from headway.errors import HeadwayError
from headway.http.asgi import (
    ClientDisconnected,
    Request,
    Response,
    error_response,
    json_response,
    read_body,
    unless_disconnected,
)
from headway.http.router import UNMATCHED, Router

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499
INTERNAL_ERROR = "internal_error"
DISCONNECTED = "client_disconnected"


class AnswerObserver(Protocol):
    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        """One answer; ``error`` is the error type of a failure, None for a success."""


class NoObserver:
    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        pass


class Edge:
    def __init__(
        self,
        router: Router,
        *,
        max_body_bytes: int,
        observer: AnswerObserver | None = None,
    ) -> None:
        self.router = router
        self._max_body_bytes = max_body_bytes
        self._observer = observer or NoObserver()

    async def __call__(self, request: Request) -> Response:
        started = time.perf_counter()
        route = UNMATCHED
        error: str | None = None
        try:
            matched, request.path_params = self.router.match(request.method, request.path)
            route = matched.name
            request.body = await read_body(request, matched.max_body_bytes or self._max_body_bytes)
            response = await unless_disconnected(matched.handler(request), request.receive)
        except ClientDisconnected:
            self._observer.answered(
                route, CLIENT_CLOSED, time.perf_counter() - started, DISCONNECTED
            )
            raise
        except HeadwayError as exc:
            if route == UNMATCHED:
                route = self.router.name_of(request.path)
            error = exc.type
            if exc.status >= 500 and not exc.quiet:
                log.warning(
                    "%s failed: %s (%s) request_id=%s tenant=%s",
                    route,
                    exc.type,
                    exc.message,
                    request.id,
                    request.tenant or "-",
                )
            response = error_response(exc)
        except Exception:
            error = INTERNAL_ERROR
            log.exception(
                "unhandled error on %s %s request_id=%s tenant=%s",
                request.method,
                route,
                request.id,
                request.tenant or "-",
            )
            response = json_response(
                {"error": {"type": INTERNAL_ERROR, "message": "internal error"}}, 500
            )
        response.headers.update(request.response_headers)
        response.headers["x-request-id"] = request.id
        self._observer.answered(route, response.status, time.perf_counter() - started, error)
        return response
