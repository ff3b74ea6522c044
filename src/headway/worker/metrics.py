"""The worker's metrics; also the batcher's observer and the edge's answer observer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headway.http.metrics import LATENCY_BUCKETS
from headway.worker.batcher import BatchRun

TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, *LATENCY_BUCKETS)


class WorkerMetrics:
    def __init__(self, pool: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = {"pool": pool}
        self._registry_up = Gauge(
            "headway_worker_registry_up",
            "1 while the worker reads the model registry, 0 while its database is "
            "unreachable: a start waits (with backoff, unready), a running worker serves "
            "what it holds.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
        self._registry_retries = Counter(
            "headway_worker_registry_retries_total",
            "Pauses of a starting worker before it tried the unreachable registry again.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
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
        self._tokens = Counter(
            "headway_worker_tokens_total",
            "Real tokens run through the model (padding not included).",
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
        self._batch_tokens = Histogram(
            "headway_worker_batch_tokens",
            "Tokens computed per batch, padding included.",
            ["pool"],
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self._padding = Histogram(
            "headway_worker_padding_ratio",
            "Share of a batch's computed tokens that were padding.",
            ["pool"],
            buckets=RATIO_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self._queue_seconds = Histogram(
            "headway_worker_queue_seconds",
            "Time a chunk waited in the queue before its batch ran.",
            ["pool"],
            buckets=FAST_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self._tokenize_seconds = Histogram(
            "headway_worker_tokenize_seconds",
            "Time to tokenize a chunk.",
            ["pool"],
            buckets=FAST_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self._batch_seconds = Histogram(
            "headway_worker_batch_seconds",
            "Inference time per batch (the model calls).",
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
        self._model_loads = Counter(
            "headway_worker_model_loads_total",
            "Model versions loaded: at start or when the registry named them (start), or "
            "when a chunk first asked for one served on demand (demand).",
            ["pool", "trigger"],
            registry=self.registry,
        )
        self._model_unloads = Counter(
            "headway_worker_model_unloads_total",
            "Model versions unloaded: no longer named (retired), or least recently used "
            "beyond worker.memory_budget_mb (budget).",
            ["pool", "reason"],
            registry=self.registry,
        )
        self._model_load_seconds = Histogram(
            "headway_worker_model_load_seconds",
            "Time to load and warm up one model version.",
            ["pool"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=self.registry,
        ).labels(**labels)
        self._models_loaded = Gauge(
            "headway_worker_models_loaded",
            "Model versions loaded now.",
            ["pool"],
            registry=self.registry,
        ).labels(**labels)
        self._pool = pool

    def model_loaded(self, trigger: str, seconds: float, loaded: int) -> None:
        self._model_loads.labels(pool=self._pool, trigger=trigger).inc()
        self._model_load_seconds.observe(seconds)
        self._models_loaded.set(loaded)

    def model_unloaded(self, reason: str, loaded: int) -> None:
        self._model_unloads.labels(pool=self._pool, reason=reason).inc()
        self._models_loaded.set(loaded)

    def batch_done(self, batch: BatchRun) -> None:
        self._texts.inc(batch.texts)
        self._tokens.inc(batch.tokens)
        self._padded.inc(batch.padded_tokens)
        self._batch_texts.observe(batch.texts)
        self._batch_tokens.observe(batch.padded_tokens)
        self._padding.observe(batch.padding_ratio)
        self._batch_seconds.observe(batch.seconds)

    def chunk_timed(self, tokenize_s: float, queue_s: float) -> None:
        self._tokenize_seconds.observe(tokenize_s)
        self._queue_seconds.observe(queue_s)

    def dropped(self, reason: str, texts: int) -> None:
        self._dropped.labels(pool=self._pool, reason=reason).inc(texts)

    def queue_depth(self, texts: int) -> None:
        self._queue.set(texts)

    def answered(self, route: str, status: int, seconds: float, error: str | None) -> None:
        """Chunks answered, by outcome (``ok`` or the error type); other routes are not chunks."""
        if route in _CHUNK_ROUTES:
            self.chunks.labels(pool=self._pool, outcome=error or "ok").inc()

    def registry_up(self, up: bool) -> None:
        self._registry_up.set(1 if up else 0)

    def registry_retry(self) -> None:
        self._registry_retries.inc()


_CHUNK_ROUTES = frozenset(("embed", "score"))
