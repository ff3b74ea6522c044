"""Spans exported in batches over OTLP/HTTP with the JSON encoding.

``OtlpExporter`` is the tracer's ``SpanSink``. ``export`` encodes a request's spans into
OTLP/JSON bytes as its SERVER span ends, while they are hot in the cache, and the bytes wait in
a bounded buffer: a full buffer drops and counts them, so tracing never blocks or fails a
request. A task on the event loop joins the waiting bytes every ``interval_s``, or sooner once
``batch_spans`` wait, into one ``ExportTraceServiceRequest`` (ids in hex, as the OTLP spec says
for JSON) posted to the collector's ``/v1/traces`` through a ``Transport``.

Failures are handled as the OTLP/HTTP spec asks of a client: a refused or broken connection, a
timeout, or 429, 502, 503 or 504 is retried with exponential backoff and full jitter (or after
the collector's ``Retry-After``) up to ``max_attempts`` posts, new spans buffering meanwhile;
any other answer drops the batch at once; a partial success counts its ``rejectedSpans`` as
dropped. Every drop is counted by reason; failures are logged once a minute at most. ``close``
lets a post in flight finish, cuts a backoff short, and posts what is left, each batch once
more: a batch taken from the buffer is always posted or counted as dropped. Encoding as a
request ends, and posting from the event loop rather than a thread, are the cheaper choices
(docs/DESIGN.md, "Decisions").
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import msgspec
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from headway import __version__
from headway.tracing.spans import AttributeValue, Span
from headway.transport.base import Transport, TransportError, UpstreamRequest
from headway.transport.http1 import Http1Transport

log = logging.getLogger(__name__)

_json = msgspec.json.encode
CONTENT_TYPE = "application/json"
LOG_EVERY_S = 60.0
RETRYABLE = frozenset((429, 502, 503, 504))
"""The answers OTLP/HTTP says a client retries; any other failure is final."""
DROP_REASONS = ("buffer_full", "export_failed", "rejected")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5
    """Posts of one batch, the first included."""
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 30.0
    """A collector's Retry-After is followed up to this."""

    def delay_s(self, retry: int, retry_after_s: float | None, draw: float) -> float:
        """Before retry number ``retry`` (1, 2, ...): the collector's wish, else a draw in
        [0, backoff) with the backoff doubling each time (full jitter)."""
        if retry_after_s is not None:
            return min(retry_after_s, self.max_retry_after_s)
        return draw * min(self.max_backoff_s, self.backoff_s * 2.0 ** (retry - 1))


class _Failed(Exception):
    """A post that did not land; ``retry``: whether OTLP says to try again."""

    def __init__(self, reason: str, *, retry: bool, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry = retry
        self.retry_after_s = retry_after_s


class OtlpExporter:
    def __init__(
        self,
        endpoint: str,
        resource: dict[str, AttributeValue],
        *,
        transport: Transport | None = None,
        interval_s: float = 1.0,
        batch_spans: int = 1024,
        max_spans: int = 20_000,
        timeout_s: float = 5.0,
        retry: RetryPolicy = RetryPolicy(),
        random_draw: Callable[[], float] = random.random,
    ) -> None:
        self.endpoint = endpoint
        url = urllib.parse.urlsplit(endpoint)
        self._base_url = f"{url.scheme}://{url.netloc}"
        self._path = (url.path or "/v1/traces") + (f"?{url.query}" if url.query else "")
        self._transport = transport or Http1Transport()
        self._resource = encode_attributes(resource)
        self._interval_s = interval_s
        self._batch_spans = batch_spans
        self._max_spans = max_spans
        self._timeout_s = timeout_s
        self._retry = retry
        self._draw = random_draw
        self._buffer: deque[tuple[bytes, int]] = deque()
        self._buffered = 0  # spans in the buffer
        self._posting = 0
        self._due = asyncio.Event()
        self._stopping = asyncio.Event()
        self._sending = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._last_logged = 0.0
        self.exported = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.failures = 0
        """Posts that failed, retried or not."""

    def export(self, spans: list[Span]) -> None:
        """On the event loop's thread (where every span of this process ends)."""
        count = len(spans)
        if self._buffered + count > self._max_spans:
            self.dropped["buffer_full"] += count
            return
        self._buffer.append((encode_spans(spans), count))
        self._buffered += count
        if self._buffered >= self._batch_spans:
            self._due.set()

    @property
    def pending(self) -> int:
        """Spans buffered or being posted."""
        return self._buffered + self._posting

    def start(self) -> None:
        """Start posting, on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="otlp-export")

    async def flush(self) -> None:
        """Post what is buffered now (retrying as usual), and return once it is posted or
        dropped."""
        await self._drain()

    async def close(self) -> None:
        """Stop the task once its post in flight ends (never cancelled: the batch would be
        lost), post what is buffered, close the connection."""
        self._stopping.set()
        self._due.set()
        if self._task is not None:
            await asyncio.wait([self._task])  # however it ends (never raises its error here)
            self._task = None
        await self._drain()
        await self._transport.close()

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._due.wait(), self._interval_s)
            self._due.clear()
            if self._stopping.is_set():
                return  # close drains
            try:
                await self._drain()
            except Exception:  # never seen; but this loop must outlive any one batch
                log.exception("trace export failed")

    async def _drain(self) -> None:
        async with self._sending:
            due = len(self._buffer)  # what is there now; what comes meanwhile waits its turn
            while due:
                parts: list[bytes] = []
                count = 0
                while due and count < self._batch_spans:
                    part, spans = self._buffer.popleft()
                    parts.append(part)
                    count += spans
                    due -= 1
                self._buffered -= count
                self._posting = count
                try:
                    await self._send(export_request(self._resource, parts), count)
                finally:
                    self._posting = 0

    async def _send(self, body: bytes, count: int) -> None:
        """One batch, retried as the module docstring says."""
        for attempt in range(1, self._retry.max_attempts + 1):
            try:
                rejected = await self._post(body)
            except _Failed as failed:
                self.failures += 1
                self._log_failure(str(failed))
                if not failed.retry or attempt == self._retry.max_attempts:
                    break
                if self._stopping.is_set():
                    break  # this was its post after close
                wished = failed.retry_after_s
                draw = self._draw() if wished is None else 0.0
                with contextlib.suppress(TimeoutError):  # close cuts it short: one post more
                    await asyncio.wait_for(
                        self._stopping.wait(), self._retry.delay_s(attempt, wished, draw)
                    )
            else:
                self.exported += count - rejected
                self.dropped["rejected"] += rejected
                return
        self.dropped["export_failed"] += count

    async def _post(self, body: bytes) -> int:
        """One post; the spans the collector rejected of an accepted post."""
        request = UpstreamRequest(
            "POST", self._base_url, self._path, self._timeout_s, body, CONTENT_TYPE
        )
        try:
            reply = await self._transport.send(request)
        except TransportError as exc:
            raise _Failed(f"{type(exc).__name__}: {exc}", retry=True) from exc
        if reply.status >= 300:
            raise _Failed(
                f"the collector answered {reply.status}",
                retry=reply.status in RETRYABLE,
                retry_after_s=retry_after_s(reply.headers.get("retry-after"), time.time()),
            )
        return rejected_spans(reply.body)

    def _log_failure(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_logged >= LOG_EVERY_S:
            self._last_logged = now
            log.warning("trace export to %s failed: %s", self.endpoint, reason)


def retry_after_s(header: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds from now: delta-seconds or an HTTP date; None when absent
    or unreadable."""
    if header is None:
        return None
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


class _PartialSuccess(msgspec.Struct):
    rejectedSpans: int | str = 0


class _ExportResponse(msgspec.Struct):
    partialSuccess: _PartialSuccess | None = None


_response = msgspec.json.Decoder(_ExportResponse)


def rejected_spans(reply: bytes) -> int:
    """The spans an accepted post's ``ExportTraceServiceResponse`` says were rejected (0
    for an empty or unreadable body: the post landed)."""
    if b"rejectedSpans" not in reply:
        return 0
    try:
        partial = _response.decode(reply).partialSuccess
        return max(0, int(partial.rejectedSpans)) if partial is not None else 0
    except (msgspec.DecodeError, ValueError):
        return 0


def export_request(resource: bytes, parts: Sequence[bytes]) -> bytes:
    """An ``ExportTraceServiceRequest`` in OTLP/JSON of encoded spans (``encode_spans``
    parts); ``resource``: its encoded attributes."""
    return b"".join(
        (
            b'{"resourceSpans":[{"resource":{"attributes":[',
            resource,
            b']},"scopeSpans":[{"scope":{"name":"headway","version":',
            _json(__version__),
            b'},"spans":[',
            b",".join(parts),
            b"]}]}]}",
        )
    )


class _Status(msgspec.Struct, omit_defaults=True, gc=False):
    code: int = 0
    message: str = ""


_OK = _Status()


class _Span(msgspec.Struct, omit_defaults=True, gc=False):
    """OTLP's ``Span`` as its JSON names it (int64 times as JSON numbers, which the
    protobuf JSON mapping accepts beside strings)."""

    traceId: str
    spanId: str
    name: str
    kind: int
    startTimeUnixNano: int
    endTimeUnixNano: int
    attributes: list[msgspec.Raw]
    status: _Status
    parentSpanId: str = ""


_encode = msgspec.json.Encoder().encode


def encode_spans(spans: Sequence[Span]) -> bytes:
    """OTLP/JSON ``Span`` objects, comma-separated, of spans of one trace: each a struct
    that msgspec writes in C, its attributes items of ``_ITEMS``; a span id is formatted in
    hex once, where it is also another's parent."""
    hexes = {span.span_id: "%016x" % span.span_id for span in spans}  # noqa: UP031 - faster
    return _encode(
        [
            _Span(
                span.trace_hex,
                hexes[span.span_id],
                span.name,
                span.kind,
                span.start_ns,
                span.end_ns,
                _items(span.attributes),
                _Status(2, span.error) if span.error else _OK,
                (hexes.get(span.parent_id) or f"{span.parent_id:016x}") if span.parent_id else "",
            )
            for span in spans
        ]
    )[1:-1]


def encode_attributes(attributes: dict[str, AttributeValue]) -> bytes:
    """OTLP ``KeyValue`` list items, comma-separated (a resource's attributes)."""
    return b",".join(bytes(item) for item in _items(attributes))


def _items(attributes: dict[str, AttributeValue]) -> list[msgspec.Raw]:
    """The attributes' items, found by (key, value, type) triples made in C (zip, map):
    the type keeps True apart from 1 and 1.0, which are equal dict keys."""
    if not attributes:
        return []
    values = attributes.values()
    return list(map(_item, zip(attributes, values, map(type, values), strict=True)))


class _Items(dict[tuple[str, AttributeValue, type], msgspec.Raw]):
    """OTLP ``KeyValue`` items by ``(key, value, type)``: strings, 64-bit ints (as JSON
    strings), bools, doubles.

    Keys and most values come from the code (routes, stages, status codes, tenants,
    counts), so an item is encoded once and found again in C (a miss calls
    ``__missing__``). A key's values stop being kept once it has shown ``_MAX_VALUES`` (a
    request id, a duration would fill the dict otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self._values: dict[str, int] = {}
        self._heads: dict[str, bytes] = {}

    def __missing__(self, triple: tuple[str, AttributeValue, type]) -> msgspec.Raw:
        key, value, kind = triple
        head = self._heads.get(key)
        if head is None:
            head = b'{"key":' + _json(key) + b',"value":{'
            if len(self._heads) < _MAX_VALUES:
                self._heads[key] = head
        if kind is str:
            item = msgspec.Raw(head + b'"stringValue":' + _json(value) + b"}}")
        elif kind is bool:
            item = msgspec.Raw(head + (b'"boolValue":true}}' if value else b'"boolValue":false}}'))
        elif kind is int:
            item = msgspec.Raw(head + b'"intValue":"%d"}}' % value)  # type: ignore[str-format]
        else:
            item = msgspec.Raw(head + b'"doubleValue":' + _json(value) + b"}}")
        seen = self._values.get(key, 0)
        if seen < _MAX_VALUES and len(self._values) < _MAX_VALUES:
            self._values[key] = seen + 1
            self[triple] = item
        return item


_MAX_VALUES = 256
_item = _Items().__getitem__


class ExporterCollector(Collector):
    """The exporter's counts as Prometheus counters."""

    def __init__(self, exporter: OtlpExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterator[CounterMetricFamily]:
        exporter = self._exporter
        yield CounterMetricFamily(
            "headway_trace_spans_exported", "Spans the collector accepted.", exporter.exported
        )
        dropped = CounterMetricFamily(
            "headway_trace_spans_dropped",
            "Spans dropped: the buffer was full, their export failed for good, or the "
            "collector rejected them.",
            labels=["reason"],
        )
        for reason, count in exporter.dropped.items():
            dropped.add_metric([reason], count)
        yield dropped
        yield CounterMetricFamily(
            "headway_trace_export_failures",
            "Posts to the collector that failed (each retry counts).",
            exporter.failures,
        )
