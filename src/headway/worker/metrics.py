"""The worker's metrics; also the batcher's observer and the edge's answer observer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.metrics import LATENCY_BUCKETS


class WorkerMetrics:
    def __init__(self, pool: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = {"pool": pool}
        self.chunks = Counter(
            "headway_worker_chunks_total",
            "Chunks answered, by outcome.",
            ["pool", "outcome"],
            registry=self.registry,
        )
        self._queue = Gauge(
            "headway_worker_queue_texts",
            "Texts waiting in the queue.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
        self._texts = Counter(
            "headway_worker_texts_total",
            "Texts run through the model.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
        self._padded = Counter(
            "headway_worker_padded_tokens_total",
            "Tokens computed, padding included.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
        self._batch_texts = Histogram(
            "headway_worker_batch_texts",
            "Texts per batch.",
            ["pool"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        ).labels(**labels)
        self._batch_seconds = Histogram(
            "headway_worker_batch_seconds",
            "Inference time per batch.",
            ["pool"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self._dropped = Counter(
            "headway_worker_dropped_texts_total",
            "Texts dropped before running, by reason.",
            ["pool", "reason"],
            registry=self.registry,
        )
        self._pool = pool

    def batch_done(self, texts: int, calls: int, padded_tokens: int, seconds: float) -> None:
        self._texts.inc(texts)
        self._padded.inc(padded_tokens)
        self._batch_texts.observe(texts)
        self._batch_seconds.observe(seconds)

    def dropped(self, reason: str, texts: int) -> None:
        self._dropped.labels(pool=self._pool, reason=reason).inc(texts)

    def queue_depth(self, texts: int) -> None:
        self._queue.set(texts)

    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        """Chunks answered, by outcome (``ok`` or the error type); other routes are not chunks."""
        if route in _CHUNK_ROUTES:
            self.chunks.labels(pool=self._pool, outcome=error or "ok").inc()


_CHUNK_ROUTES = frozenset(("embed", "score"))
