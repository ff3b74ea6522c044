"""The worker's HTTP face: internal chunk endpoints, health, readiness, metrics.

Readiness comes only after the model is loaded and a warm-up batch has run;
on shutdown the worker turns unready first, then finishes its queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import numpy as np

from headway import wire
from headway.background import Background
from headway.errors import (
    DeadlineExceeded,
    InvalidRequest,
    ModelMismatch,
    NoReplicas,
    Overloaded,
    ValidationFailed,
)
from headway.http.asgi import App, Handler, Request, Response, json_response
from headway.http.edge import Edge
from headway.http.router import Route, Router
from headway.metrics import metrics_handler
from headway.worker.backends.base import Backend, Encoded
from headway.worker.batcher import (
    Batcher,
    BatchLimits,
    DeadlineMissed,
    QueueFull,
    RunTiming,
    Values,
)
from headway.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)
T = TypeVar("T")

WARMUP_TEXT = "headway warm-up: the quick brown fox jumps over the lazy dog"


@dataclass(frozen=True, slots=True)
class LoadedModel:
    backend: Backend
    version: str


class WorkerService:
    """Owns the backend, the batcher and the readiness flag of one worker process."""

    def __init__(
        self,
        pool: str,
        load: Callable[[], LoadedModel],
        limits: BatchLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: WorkerMetrics | None = None,
        background: Background | None = None,
    ) -> None:
        self.pool = pool
        self._load = load
        self._limits = limits
        self._clock = clock
        self.metrics = metrics or WorkerMetrics(pool)
        self._background = background or Background()
        self.model: LoadedModel | None = None
        self.batcher: Batcher | None = None
        self.ready = False
        self.draining = False

    # lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Load and warm up before serving; a model that cannot load stops the process."""
        started = time.perf_counter()
        model = await asyncio.to_thread(self._load)
        batcher = Batcher(model.backend, self._limits, clock=self._clock, observer=self.metrics)
        warmup = model.backend.encode_texts([WARMUP_TEXT] * min(8, self._limits.max_batch_size))
        if model.backend.kind == "cross-encoder":
            warmup = model.backend.encode_pairs(WARMUP_TEXT, [WARMUP_TEXT] * 4)
        await batcher.run_now(warmup)
        batcher.start(self._background)
        self.model, self.batcher = model, batcher
        self.ready = True
        log.info(
            "worker ready: pool=%s model=%s kind=%s in %.1fs",
            self.pool,
            model.version[:12],
            model.backend.kind,
            time.perf_counter() - started,
        )

    def drain(self) -> None:
        """Turn unready so gateways stop sending; the queue is finished at shutdown."""
        self.ready = False
        self.draining = True

    async def stop(self) -> None:
        """Unready first, then finish what is queued, then release the inference thread."""
        self.ready = False
        self.draining = True
        if self.batcher is not None:
            await self.batcher.drained()
            await self.batcher.close()
        await self._background.stop()

    # requests ----------------------------------------------------------------

    def _serving(self) -> tuple[LoadedModel, Batcher]:
        if not self.ready or self.model is None or self.batcher is None:
            raise NoReplicas("worker is not ready")
        return self.model, self.batcher

    async def embed(self, chunk: wire.EmbedChunk) -> wire.ChunkResult:
        model, _ = self._serving()
        self._check_version(chunk.model_version, model)
        if model.backend.kind != "embedding":
            raise ValidationFailed("this worker serves a cross-encoder; use /internal/score")
        encoded = model.backend.encode_texts(chunk.texts)
        timing = RunTiming()
        values = await self._run(encoded, chunk, timing)
        return self._result(model, values, encoded, timing)

    async def score(self, chunk: wire.ScoreChunk) -> wire.ChunkResult:
        model, _ = self._serving()
        self._check_version(chunk.model_version, model)
        timing = RunTiming()
        if model.backend.kind == "cross-encoder":
            encoded = model.backend.encode_pairs(chunk.query, chunk.documents)
            scores = await self._run(encoded, chunk, timing)
        else:
            encoded = model.backend.encode_texts([chunk.query, *chunk.documents])
            rows = await self._run(encoded, chunk, timing)
            scores = cosine_scores(rows[0], rows[1:])
        return self._result(model, scores, encoded, timing)

    async def _run(self, encoded: list[Encoded], chunk: wire.Chunk, timing: RunTiming) -> Values:
        _, batcher = self._serving()
        if chunk.timeout_ms <= 0:
            raise DeadlineExceeded("deadline passed before the chunk arrived")
        deadline = self._clock() + chunk.timeout_ms / 1000
        outcome = batcher.submit(encoded, deadline, chunk.priority, timing)
        if isinstance(outcome, QueueFull):
            drain_s = batcher.service_time.seconds * max(
                1.0, outcome.queued_texts / self._limits.max_batch_size
            )
            raise Overloaded(
                f"queue full ({outcome.queued_texts}/{outcome.max_queue_texts} texts)",
                retry_after_s=drain_s,
            )
        try:
            return await outcome
        except DeadlineMissed as exc:
            raise DeadlineExceeded(f"dropped before running: {exc}") from exc

    @staticmethod
    def _check_version(requested: str, model: LoadedModel) -> None:
        if requested and requested != model.version:
            raise ModelMismatch(f"this worker serves {model.version}, not {requested}")

    @staticmethod
    def _result(
        model: LoadedModel, values: Values, encoded: list[Encoded], timing: RunTiming
    ) -> wire.ChunkResult:
        values = np.ascontiguousarray(values, dtype="<f4")
        return wire.ChunkResult(
            model_version=model.version,
            values=values.tobytes(),
            rows=values.shape[0],
            dimensions=values.shape[1] if values.ndim == 2 else 1,
            tokens=sum(item.n_tokens for item in encoded),
            queue_s=timing.queue_s,
            inference_s=timing.inference_s,
        )


def cosine_scores(query: Values, documents: Values) -> Values:
    """Rows are L2-normalised, so cosine is a dot product; mapped from [-1, 1] to [0, 1]."""
    return ((documents @ query + 1.0) / 2.0).astype(np.float32)


def build_worker_app(service: WorkerService) -> App:
    async def embed(request: Request) -> Response:
        chunk = _decode(wire.embed_decoder, request.body)
        return _msgpack(await service.embed(chunk))

    async def score(request: Request) -> Response:
        chunk = _decode(wire.score_decoder, request.body)
        return _msgpack(await service.score(chunk))

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        body: dict[str, object] = {"ready": service.ready, "pool": service.pool}
        if service.model is not None:
            body |= {
                "model_version": service.model.version,
                "kind": service.model.backend.kind,
                "dimensions": service.model.backend.dimensions,
            }
        if service.batcher is not None:
            body["outstanding_texts"] = service.batcher.outstanding_texts
        if service.draining:
            body["draining"] = True
        return json_response(body, 200 if service.ready else 503)

    metrics: Handler = metrics_handler(service.metrics.registry)
    router = Router(
        [
            Route("POST", wire.EmbedChunk.path, "embed", embed),
            Route("POST", wire.ScoreChunk.path, "score", score),
            Route("GET", "/healthz", "healthz", healthz),
            Route("GET", "/readyz", "readyz", readyz),
            Route("GET", "/metrics", "metrics", metrics),
        ]
    )
    edge = Edge(router, max_body_bytes=16 << 20, observer=service.metrics)
    return App(edge, on_startup=[service.start], on_shutdown=[service.stop])


def _decode(decoder: msgspec.msgpack.Decoder[T], body: bytes) -> T:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"malformed chunk: {exc}") from exc


def _msgpack(result: wire.ChunkResult) -> Response:
    return Response(wire.encode(result), content_type=wire.CONTENT_TYPE)
