"""Ended spans, exported in batches over OTLP/HTTP with the JSON encoding.

``OtlpExporter`` is the tracer's ``SpanSink``: ``add`` appends to a bounded buffer (a
full buffer drops the span and counts it: tracing never blocks or fails a request),
and one daemon thread posts the buffer every ``interval_s``, or sooner once it holds
``batch_spans``, to the collector's ``/v1/traces`` as an
``ExportTraceServiceRequest`` in OTLP's JSON form (ids in hex, as the OTLP spec
says for JSON; an OpenTelemetry Collector, Jaeger or Tempo accepts it). A post that
fails is counted and its spans dropped, with one log line a minute at most. ``close``
posts what is left.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from headway import __version__
from headway.tracing.spans import AttributeValue, Span

log = logging.getLogger(__name__)

STATUS_UNSET, STATUS_ERROR = 0, 2
LOG_EVERY_S = 60.0


class OtlpExporter:
    def __init__(
        self,
        endpoint: str,
        resource: dict[str, AttributeValue],
        *,
        interval_s: float = 1.0,
        batch_spans: int = 512,
        max_spans: int = 20_000,
        timeout_s: float = 5.0,
    ) -> None:
        self.endpoint = endpoint
        self._resource = _attributes(resource)
        self._interval_s = interval_s
        self._batch_spans = batch_spans
        self._max_spans = max_spans
        self._timeout_s = timeout_s
        self._buffer: deque[Span] = deque()
        self._wake = threading.Event()
        self._closed = False
        self._last_logged = 0.0
        self.exported = 0
        self.dropped = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._thread.start()

    def add(self, span: Span) -> None:
        buffer = self._buffer
        if len(buffer) >= self._max_spans:
            self.dropped += 1
            return
        buffer.append(span)
        if len(buffer) == self._batch_spans:
            self._wake.set()

    def close(self) -> None:
        """Post what is buffered, then stop the thread."""
        self._closed = True
        self._wake.set()
        self._thread.join(self._timeout_s + 1)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            closing = self._closed
            buffer = self._buffer
            while buffer:
                self._post([buffer.popleft() for _ in range(min(len(buffer), self._batch_spans))])
            if closing:
                return

    def _post(self, spans: Sequence[Span]) -> None:
        body = msgspec.json.encode(export_request(self._resource, spans))
        request = urllib.request.Request(
            self.endpoint, body, {"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:
                answer.read()
            self.exported += len(spans)
        except (OSError, urllib.error.URLError) as exc:
            self.failures += 1
            self.dropped += len(spans)
            now = time.monotonic()
            if now - self._last_logged >= LOG_EVERY_S:
                self._last_logged = now
                log.warning("trace export to %s failed: %s", self.endpoint, exc)


def export_request(resource: list[dict[str, Any]], spans: Sequence[Span]) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` in OTLP/JSON."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [
                    {
                        "scope": {"name": "headway", "version": __version__},
                        "spans": [_span(span) for span in spans],
                    }
                ],
            }
        ]
    }


def _span(span: Span) -> dict[str, Any]:
    encoded: dict[str, Any] = {
        "traceId": f"{span.trace_id:032x}",
        "spanId": f"{span.span_id:016x}",
        "name": span.name,
        "kind": int(span.kind),
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes(span.attributes),
        "status": {"code": STATUS_ERROR, "message": span.error}
        if span.error
        else {"code": STATUS_UNSET},
    }
    if span.parent_id:
        encoded["parentSpanId"] = f"{span.parent_id:016x}"
    return encoded


def _attributes(attributes: dict[str, AttributeValue]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _value(value: AttributeValue) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


class ExporterCollector(Collector):
    """The exporter's counts as Prometheus counters."""

    def __init__(self, exporter: OtlpExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterator[CounterMetricFamily]:
        exporter = self._exporter
        yield CounterMetricFamily(
            "headway_trace_spans_exported", "Spans the collector accepted.", exporter.exported
        )
        yield CounterMetricFamily(
            "headway_trace_spans_dropped",
            "Spans dropped: the buffer was full, or their export failed.",
            exporter.dropped,
        )
        yield CounterMetricFamily(
            "headway_trace_export_failures", "Failed posts to the collector.", exporter.failures
        )
