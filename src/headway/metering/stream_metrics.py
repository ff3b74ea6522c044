"""A JetStream stream's fill and limits as Prometheus gauges, labelled by stream.

The billing consumers export USAGE's and the executors BATCH_WORK's, from the stream
info they read anyway (every replica the same values: alerts take ``max by (stream)``).
``headway_stream_bytes`` over ``headway_stream_max_bytes`` is how full the stream is:
at ``max_bytes`` a discard=new stream refuses publishes (``HeadwayStreamFilling`` fires
at 80% for 10 minutes, before that).
"""

from __future__ import annotations

from nats.js import api
from prometheus_client import CollectorRegistry, Counter, Gauge


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, labels, registry=registry)

        self._bytes = gauge(
            "headway_stream_bytes", "Bytes the JetStream stream holds now.", "stream"
        )
        self._messages = gauge(
            "headway_stream_messages", "Messages the JetStream stream holds now.", "stream"
        )
        self._max_bytes = gauge(
            "headway_stream_max_bytes",
            "The stream's max_bytes (-1: none); full, a discard=new stream refuses publishes.",
            "stream",
        )
        self._max_age = gauge(
            "headway_stream_max_age_seconds",
            "The stream's max_age (0: none): older messages are removed.",
            "stream",
        )
        self._max_msg_size = gauge(
            "headway_stream_max_msg_size_bytes", "The stream's max_msg_size (-1: none).", "stream"
        )
        self._replicas = gauge("headway_stream_replicas", "Servers holding each message.", "stream")
        self._failures = Counter(
            "headway_stream_info_failures_total",
            "Reads of the stream's info that failed (NATS away): its gauges keep their values.",
            ["stream"],
            registry=registry,
        )

    def observe(self, info: api.StreamInfo) -> None:
        config, state = info.config, info.state
        stream = config.name or "?"
        self._bytes.labels(stream=stream).set(state.bytes or 0)
        self._messages.labels(stream=stream).set(state.messages or 0)
        self._max_bytes.labels(stream=stream).set(_or(config.max_bytes, -1))
        self._max_age.labels(stream=stream).set(_or(config.max_age, 0))
        self._max_msg_size.labels(stream=stream).set(_or(config.max_msg_size, -1))
        self._replicas.labels(stream=stream).set(_or(config.num_replicas, 1))

    def failed(self, stream: str) -> None:
        self._failures.labels(stream=stream).inc()


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
