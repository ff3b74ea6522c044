"""The outermost layer: every request is answered, and every answer counted and timed.

``Edge`` sits around the router, as Starlette's ``ServerErrorMiddleware`` sits outside all else,
and its order is the contract. A request gets our id, never the client's; an unknown path or
method is an answer like any other. From the headers alone, before a byte of the body is read,
come the route's ``auth`` (a ``Check``, whose answer, ``request.caller``, the handler does not
check again), ``accepts`` (415) and a declared length past the limit (413): a stranger's upload
costs its headers. Then the body (413 past ``max_body_bytes``, unless the route streams it) and
the handler, cancelled if the client disconnects first. A ``HeadwayError`` is answered through
the one table in ``errors.py`` (or the route's ``render_error``, same status); anything else as
a bare 500 ``internal_error`` and a log line with the traceback, never the exception's text (it
may quote the input). Every answer carries the request id, ``traceresponse`` and the headers the
handler set, and is reported to the ``AnswerObserver``; one given before the body was read whole
closes the connection, so the rest is never read. A client that disconnected gets nothing but is
still reported, as 499 (nginx's "client closed request").

All of it runs inside the request's SERVER span, continuing the caller's ``traceparent``
(``PROBES`` are never recorded), with the request as the log context.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from headway.errors import HeadwayError
from headway.http.asgi import (
    ClientDisconnected,
    Request,
    Response,
    check_declared_length,
    client_left,
    error_response,
    read_body,
    unless_disconnected,
    unread_body,
)
from headway.http.router import UNMATCHED, Check, Route, Router
from headway.logs import ACCESS_LOGGER, serving
from headway.tracing.spans import (
    Remote,
    Span,
    Tracer,
    http_server_attributes,
    span,
    traceparent_of,
)

log = logging.getLogger(__name__)
access = logging.getLogger(ACCESS_LOGGER)

CLIENT_CLOSED = 499
INTERNAL_ERROR = "internal_error"
DISCONNECTED = "client_disconnected"


class AnswerObserver(Protocol):
    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        """One answer; ``error`` is the error type of a failure, None for a success."""


class NoObserver:
    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        pass


PROBES = frozenset(("/healthz", "/readyz", "/metrics"))
"""Paths polled by machines every second or so: never recorded as traces."""


def _rendered(matched: Route | None, exc: HeadwayError) -> Response:
    """``exc`` as the route writes errors (the table's JSON unless it says otherwise)."""
    render = matched.render_error if matched is not None else None
    return (render or error_response)(exc)


class Edge:
    def __init__(
        self,
        router: Router,
        *,
        max_body_bytes: int,
        observer: AnswerObserver | None = None,
        tracer: Tracer | None = None,
        access_log: bool = False,
        checks: Mapping[str, Check] | None = None,
    ) -> None:
        """``checks``: each ``Route.auth`` name's ``Check``; a route naming one not given
        is refused here, at start-up."""
        self.router = router
        self._checks = dict(checks or {})
        unbound = sorted({r.auth for r in router.routes() if r.auth} - set(self._checks))
        if unbound:
            raise ValueError(f"routes name checks the edge was not given: {', '.join(unbound)}")
        self._max_body_bytes = max_body_bytes
        self._observer = observer or NoObserver()
        self._tracer = tracer or Tracer()
        self._untraced = Tracer()
        self._access_log = access_log

    async def __call__(self, request: Request) -> Response:
        started = time.perf_counter()
        method, path = request.method, request.path
        tracer = self._untraced if path in PROBES else self._tracer
        trace = tracer.server(request.headers.get("traceparent"), method)
        if trace.recording:
            assert isinstance(trace, Span)
            trace.attributes = http_server_attributes(method, path, request.scope, request.headers)
        logged = serving.set(request)
        route = UNMATCHED
        matched: Route | None = None
        error: str | None = None
        try:
            with trace:
                try:
                    matched, request.path_params = self.router.match(method, path)
                    route = request.route = matched.name
                    if trace.recording:
                        assert isinstance(trace, Span)
                        trace.name = f"{method} {matched.path}"
                        trace.attributes["http.route"] = matched.path
                    if matched.auth is not None:
                        with span("authenticate"):
                            request.caller = await self._checks[matched.auth](request)
                    if matched.accepts is not None:
                        matched.accepts(request.headers)
                    limit = matched.max_body_bytes or self._max_body_bytes
                    check_declared_length(request.headers, limit)
                    if matched.streams_body:
                        response = await unless_disconnected(
                            matched.handler(request), request, watched=False
                        )
                    else:
                        request.body = await read_body(request, limit)
                        response = await unless_disconnected(matched.handler(request), request)
                except ClientDisconnected:
                    self._answered(request, trace, route, CLIENT_CLOSED, started, DISCONNECTED)
                    raise
                except asyncio.CancelledError:
                    if not client_left(request):
                        raise
                    # cancelled by the server while the key or the body was awaited
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                    self._answered(request, trace, route, CLIENT_CLOSED, started, DISCONNECTED)
                    raise ClientDisconnected from None
                except HeadwayError as exc:
                    if route == UNMATCHED:
                        route = self.router.name_of(path)
                    error = exc.type
                    if exc.status >= 500 and not exc.quiet:
                        log.warning(
                            "%s failed: %s (%s) tenant=%s",
                            route,
                            exc.type,
                            exc.message,
                            request.tenant or "-",
                        )
                    response = _rendered(matched, exc)
                except Exception:
                    error = INTERNAL_ERROR
                    log.exception(
                        "unhandled error on %s %s tenant=%s", method, route, request.tenant or "-"
                    )
                    response = _rendered(matched, HeadwayError("internal error"))
                response.headers.update(request.response_headers)
                if unread_body(request):
                    response.headers["connection"] = "close"
                response.headers["x-request-id"] = request.id
                response.headers["traceresponse"] = traceparent_of(trace)  # Trace Context 2
                self._answered(request, trace, route, response.status, started, error)
        finally:
            serving.reset(logged)
        return response

    def _answered(
        self,
        request: Request,
        trace: Span | Remote,
        route: str,
        status: int,
        started: float,
        error: str | None,
    ) -> None:
        seconds = time.perf_counter() - started
        self._observer.answered(route, status, seconds, error)
        if trace.recording:
            assert isinstance(trace, Span)
            attributes = trace.attributes
            attributes["http.response.status_code"] = status
            if error is not None:
                attributes["headway.error.type"] = error
                if status >= 500:
                    attributes["error.type"] = str(status)
                    trace.fail(error)
            if request.tenant:
                attributes["headway.tenant"] = request.tenant
            attributes["headway.request_id"] = request.id
        if self._access_log:
            access.info(
                "%s %s %d",
                request.method,
                route,
                status,
                extra={
                    "method": request.method,
                    "status": status,
                    "outcome": error or "ok",
                    "seconds": round(seconds, 6),
                },
            )
