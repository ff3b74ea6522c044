"""Spans of the request being served, in the context of the task that serves it.

One ``Tracer`` per process. The edge opens the request's SERVER span (``Tracer.server``);
``span(name)`` opens a child of the span in a context variable, which asyncio copies into every
task the request starts, so a chunk's attempts are children without being handed it. The
request's spans go to the tracer's ``SpanSink`` together, when its own span ends.

Sampling is decided once per trace, at the SERVER span: a caller's sampled flag is followed; a
new trace is sampled when the low 64 bits of its id fall under ``sample_ratio`` (as
OpenTelemetry's ``TraceIdRatioBased``), so every process decides the same for one trace id. A
trace not recorded still has a trace id, which every log line carries and every call to a
worker passes on: as it came when not sampled, unsampled when tracing is off (no sink). Its
``span`` is ``NOOP``, one context-variable read.

Spans follow OpenTelemetry's data model and are exported as OTLP; a trace id is formatted in hex
once a trace, where the traceparent, the logs and the export read it. The OpenTelemetry SDK is
not used on the request path, for its CPU cost (docs/DESIGN.md, "Decisions").
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from enum import IntEnum
from types import TracebackType
from typing import Protocol, cast

import msgspec

from headway.tracing.traceparent import format_traceparent, parse

AttributeValue = str | int | float | bool
Attributes = dict[str, AttributeValue]

_RATIO_BITS = 1 << 64
_now_ns = time.time_ns


class SpanKind(IntEnum):
    """OTLP's ``Span.SpanKind`` values."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3


class SpanSink(Protocol):
    def export(self, spans: list[Span]) -> None:
        """Spans of one trace that ended: its local root with every child that ended
        before it, in the order they ended, or one child that ended after its root.
        Called on the thread that ended them, so it must be quick."""


class Span(msgspec.Struct, gc=False):
    """A recorded span. ``error``: the error type of a failure ("" for none).

    The spans of one request leave the process together: a child that ends goes into
    its local root's ``ended``, and the root, when it ends, hands them all to the sink
    at once (one encoding loop while they are hot, and nothing held for the exporter
    but bytes). A child that ends after its root (a shadow copy's attempt) goes alone.
    A msgspec struct, not tracked by the cyclic collector: the one cycle a span is in
    (root, ``ended``, child, root) is broken when the root ends.
    """

    tracer: Tracer
    trace_hex: str
    """The trace id in hex (32 characters)."""
    span_id: int
    parent_id: int
    name: str
    kind: SpanKind
    start_ns: int
    attributes: Attributes
    root: Span | None = None
    """The local root (the request's SERVER span); None for the root itself."""
    end_ns: int = 0
    error: str = ""
    ended: list[Span] | None = None
    """The root's: its children that ended so far; None once it has ended."""
    _token: Token[Current | None] | None = None

    recording = True

    @property
    def trace_id(self) -> int:
        return int(self.trace_hex, 16)

    @property
    def sampled(self) -> bool:
        return True

    def set(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def fail(self, error: str) -> None:
        self.error = error

    def end(self, end_ns: int | None = None) -> None:
        self.end_ns = _now_ns() if end_ns is None else end_ns
        root = self.root
        if root is None:
            ended = self.ended or []
            self.ended = None
            ended.append(self)
            self.tracer.export(ended)
        elif root.ended is None:
            self.tracer.export([self])
        else:
            root.ended.append(self)

    def __enter__(self) -> Span:
        self._token = _current.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and not self.error:
            self.error = getattr(exc, "type", None) or type(exc).__name__
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        self.end()


@dataclass(slots=True, eq=False)
class Remote:
    """A trace this process does not record: its id and the span to name as parent
    when the request calls on (the caller's, or one made up for a new trace)."""

    trace_id: int
    span_id: int
    sampled: bool
    header: str
    """The ``traceparent`` it passes on: the caller's as it came, or made once."""
    _token: Token[Current | None] | None = field(default=None, repr=False)

    recording = False

    def set(self, key: str, value: AttributeValue) -> None:
        pass

    def fail(self, error: str) -> None:
        pass

    def __enter__(self) -> Remote:
        self._token = _current.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


class _Noop:
    """The child of a span not recorded: does nothing, changes no context."""

    __slots__ = ()
    recording = False

    def set(self, key: str, value: AttributeValue) -> None:
        pass

    def fail(self, error: str) -> None:
        pass

    def __enter__(self) -> _Noop:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pass


NOOP = _Noop()
Current = Span | Remote
_current: ContextVar[Current | None] = ContextVar("headway_span", default=None)


class Tracer:
    """Makes the spans of one process. ``sink``: where ended spans go; None: tracing off."""

    def __init__(
        self,
        sink: SpanSink | None = None,
        *,
        sample_ratio: float = 1.0,
        random_bits: Callable[[int], int] = random.getrandbits,
    ) -> None:
        self.sink = sink
        self._threshold = int(sample_ratio * _RATIO_BITS)
        self.bits = random_bits

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    def export(self, spans: list[Span]) -> None:
        if self.sink is not None:
            self.sink.export(spans)

    def server(
        self, traceparent: str | None, name: str, attributes: Attributes | None = None
    ) -> Span | Remote:
        """The span of a request that arrived with ``traceparent`` (None: absent)."""
        incoming = parse(traceparent)
        if incoming is not None and (self.sink is None or not incoming.sampled):
            # passed on as it came
            return Remote(incoming.trace_id, incoming.span_id, incoming.sampled, traceparent or "")
        if incoming is not None:
            assert traceparent is not None
            trace_hex, parent_id = traceparent[3:35], incoming.span_id
        else:
            trace_id, parent_id = self.bits(128) or 1, 0
            if self.sink is None or (trace_id & (_RATIO_BITS - 1)) >= self._threshold:
                span_id = self.bits(64) or 1
                return Remote(
                    trace_id, span_id, False, format_traceparent(trace_id, span_id, False)
                )
            trace_hex = f"{trace_id:032x}"
        return Span(
            self,
            trace_hex,
            self.bits(64) or 1,
            parent_id,
            name,
            SpanKind.SERVER,
            _now_ns(),
            attributes if attributes is not None else {},
            ended=[],
        )


def span(
    name: str, attributes: Attributes | None = None, kind: SpanKind = SpanKind.INTERNAL
) -> Span | _Noop:
    """A child of the current span, to use as a context manager; ``NOOP`` when the
    current trace is not recorded here."""
    parent = _current.get()
    if type(parent) is not Span:
        return NOOP
    return _child(parent, name, kind, attributes)


def _child(parent: Span, name: str, kind: SpanKind, attributes: Attributes | None) -> Span:
    tracer = parent.tracer
    return Span(
        tracer,
        parent.trace_hex,
        tracer.bits(64) or 1,
        parent.span_id,
        name,
        kind,
        _now_ns(),
        attributes if attributes is not None else {},
        parent.root or parent,
    )


def record(
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: Attributes | None = None,
    parent: Span | None = None,
) -> Span | None:
    """A span that already happened (a worker's queue wait, say), a child of ``parent`` or
    else of the current span; None when the trace is not recorded here."""
    if parent is None:
        now = _current.get()
        if type(now) is not Span:
            return None
        parent = now
    done = _child(parent, name, SpanKind.INTERNAL, attributes)
    done.start_ns = start_ns
    done.end(end_ns)
    return done


def current() -> Current | None:
    return _current.get()


def current_traceparent() -> str | None:
    """What a call made now sends as ``traceparent``: the current span as its parent."""
    now = _current.get()
    if now is None:
        return None
    return traceparent_of(now)


def traceparent_of(trace: Current) -> str:
    if type(trace) is Span:
        return f"00-{trace.trace_hex}-{trace.span_id:016x}-01"
    assert isinstance(trace, Remote)
    return trace.header


def current_trace_id() -> str:
    """The current trace's id in hex, "" outside any request."""
    now = _current.get()
    if now is None:
        return ""
    return now.trace_hex if type(now) is Span else now.header[3:35]  # type: ignore[union-attr]


def wall_ns(at: float, clock_now: float, now_ns: int | None = None) -> int:
    """Unix nanoseconds of ``at``, a reading of a monotonic clock that reads ``clock_now``
    now: for spans recorded after the fact from monotonic timestamps."""
    return (_now_ns() if now_ns is None else now_ns) - int((clock_now - at) * 1e9)


def http_server_attributes(
    method: str, path: str, scope: Mapping[str, object], headers: Mapping[str, str]
) -> Attributes:
    """The stable HTTP semantic conventions of a SERVER span, known at arrival (the ASGI
    scope's ``server`` is (host, port), or (path, None) on a Unix socket)."""
    attributes: Attributes = {
        "http.request.method": method,
        "url.path": path,
        "url.scheme": scope.get("scheme") or "http",  # type: ignore[dict-item]
        "network.protocol.version": scope.get("http_version") or "1.1",  # type: ignore[dict-item]
    }
    server = cast("tuple[str, int | None] | None", scope.get("server"))
    if server:
        attributes["server.address"] = server[0]
        if server[1] is not None:
            attributes["server.port"] = server[1]
    client = cast("tuple[str, int] | None", scope.get("client"))
    if client:
        attributes["client.address"] = client[0]
    agent = headers.get("user-agent")
    if agent:
        attributes["user_agent.original"] = agent[:256]
    return attributes


def recording() -> bool:
    """Whether the current span is recorded here."""
    now = _current.get()
    return now is not None and now.recording
