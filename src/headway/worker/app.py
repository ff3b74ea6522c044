"""The worker's HTTP face: internal chunk endpoints, health, readiness, metrics.

A worker holds every version its ``ModelSource`` wants, each with its own loaded
backend and ``Batcher`` (its own queue), all running on the worker's one inference
thread: a replica is as fast with two versions as with one, and a shadow batch never
runs beside real work on another core. Readiness comes only after each version is
loaded and a warm-up batch has run; while the source cannot read the model registry
(its Postgres away: ``RegistryUnavailable``), the start waits with backoff
(``headway.dependency_link``, ``headway_worker_registry_up``) rather than exits. Every
``registry_poll_s`` the worker reads the source's change counter; when it moved, it
loads (in a thread, off the event loop) and warms up what is newly wanted before
advertising it, stops taking chunks for what is no longer wanted, and unloads that once
its queue is empty. A chunk is served by
the version it names (``ModelMismatch`` if not held; none named: the first). Shadow
chunks run only in spare capacity: taken only while the worker is idle (a batcher
drains its queue into each batch, so an empty queue is not idleness), refused at once
otherwise; a real chunk arriving meanwhile waits at most that one batch. On shutdown
the worker turns unready first, then finishes its queues.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import numpy as np

from headway import wire
from headway.background import Background
from headway.dependency_link import Backoff, DependencyLink, until_reachable
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
from headway.http.metrics import metrics_handler
from headway.http.router import Route, Router
from headway.models.backend import Encoded
from headway.otlp.setup import ProcessTracing
from headway.registry.errors import RegistryUnavailable
from headway.tracing.spans import record, recording, span, wall_ns
from headway.worker.batcher import (
    Batcher,
    BatchLimits,
    DeadlineMissed,
    QueueFull,
    RunTiming,
    Values,
)
from headway.worker.metrics import WorkerMetrics
from headway.worker.sources import LoadedModel, ModelSource

log = logging.getLogger(__name__)
T = TypeVar("T")

WARMUP_TEXT = "headway warm-up: the quick brown fox jumps over the lazy dog"


@dataclass(frozen=True, slots=True)
class Held:
    """One version a worker serves: its backend and its own queue."""

    model: LoadedModel
    batcher: Batcher


class WorkerService:
    """Owns the held versions, their batchers and the readiness flag of one worker.

    ``held`` is written only by ``start`` and the registry poll (one owner); request
    handlers read it without an ``await`` between the look-up and the submit, so a
    version retired meanwhile never takes a chunk it would not run.
    """

    def __init__(
        self,
        pool: str,
        source: ModelSource,
        limits: BatchLimits,
        *,
        registry_poll_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: WorkerMetrics | None = None,
        background: Background | None = None,
        registry_retry_max_s: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.pool = pool
        self._source = source
        self._limits = limits
        self._registry_poll_s = registry_poll_s
        self._clock = clock
        self.metrics = metrics or WorkerMetrics(pool)
        self._background = background or Background()
        self.registry_link = DependencyLink(
            "model registry",
            on_change=self.metrics.registry_up,
            on_retry=self.metrics.registry_retry,
            backoff=Backoff(min(0.1, registry_retry_max_s), registry_retry_max_s),
            sleep=sleep,
            meanwhile="a starting worker stays unready, a running one serves what it holds",
            resumed="the worker follows it again",
        )
        self.held: dict[str, Held] = {}
        """Versions served, the default first."""
        self.retiring: list[Held] = []
        """Versions no longer served, unloaded once their queue is empty."""
        self._changes = -1
        self._inference = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self._poll: asyncio.Task[None] | None = None
        self.ready = False
        self.draining = False
        self.completed_texts = 0
        """Texts of interactive and batch chunks served since start (``wire.COMPLETED_HEADER``)."""

    # lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Load and warm up before serving; a model that cannot load stops the process."""
        started = time.perf_counter()
        await until_reachable(self._sync, self.registry_link, RegistryUnavailable, "starting")
        self.ready = True
        self._poll = self._background.every("registry", self._registry_poll_s, self.refresh)
        log.info(
            "worker ready: pool=%s versions=%s in %.1fs",
            self.pool,
            ",".join(version[:12] for version in self.held),
            time.perf_counter() - started,
        )

    def drain(self) -> None:
        """Turn unready so gateways stop sending; the queue is finished at shutdown."""
        self.ready = False
        self.draining = True

    async def stop(self) -> None:
        """Unready first, then finish what is queued, then release the inference threads."""
        self.ready = False
        self.draining = True
        if self._poll is not None:
            self._poll.cancel()
        for held in [*self.held.values(), *self.retiring]:
            await held.batcher.drained()
            await held.batcher.close()
        await self._background.stop()
        self._inference.shutdown(wait=True)

    async def refresh(self) -> None:
        """One registry poll: follow a change, then unload retired versions now idle. The
        registry away, the worker serves what it holds, and says so once (its link)."""
        try:
            if await asyncio.to_thread(self._source.changes) != self._changes:
                await self._sync()
        except RegistryUnavailable as exc:
            self.registry_link.failed(exc, "polling it")
        else:
            self.registry_link.succeeded()
        for held in [h for h in self.retiring if h.batcher.outstanding_texts == 0]:
            self.retiring.remove(held)
            await held.batcher.close()
            log.info("worker unloaded version %s", held.model.version[:12])

    async def _sync(self) -> None:
        """Hold exactly the versions wanted now: new ones loaded and warmed before they are
        served; if one fails to load, those loaded stay and the next poll tries again."""
        wanted = await asyncio.to_thread(self._source.wanted)
        for version in wanted.versions:
            if version in self.held:
                continue
            revived = [held for held in self.retiring if held.model.version == version]
            if revived:  # wanted again before its queue emptied: it is still loaded
                self.retiring.remove(revived[0])
            self.held[version] = revived[0] if revived else await self._load(version)
        retired = [held for version, held in self.held.items() if version not in wanted.versions]
        self.held = {version: self.held[version] for version in wanted.versions}
        self.retiring += retired
        self._changes = wanted.changes

    async def _load(self, version: str) -> Held:
        model = await asyncio.to_thread(self._source.load, version)
        backend = model.backend
        batcher = Batcher(
            backend,
            self._limits,
            clock=self._clock,
            observer=self.metrics,
            executor=self._inference,
        )
        if backend.kind == "cross-encoder":
            warmup = backend.encode_pairs(WARMUP_TEXT, [WARMUP_TEXT] * 4)
        else:
            warmup = backend.encode_texts([WARMUP_TEXT] * min(8, self._limits.max_batch_size))
        await batcher.run_now(warmup)
        batcher.start(self._background)
        log.info("worker loaded version %s (%s)", version[:12], backend.kind)
        return Held(model, batcher)

    # requests ----------------------------------------------------------------

    @property
    def outstanding_texts(self) -> int:
        return sum(h.batcher.outstanding_texts for h in [*self.held.values(), *self.retiring])

    def _accept(self, chunk: wire.Chunk) -> Held:
        """The version that serves ``chunk``, once it may run here; every refusal comes
        before the chunk is tokenized (no work spent on what is refused)."""
        if not self.ready or not self.held:
            raise NoReplicas("worker is not ready")
        if chunk.timeout_ms <= 0:
            raise DeadlineExceeded("deadline passed before the chunk arrived")
        requested = chunk.model_version
        held = self.held.get(requested) if requested else next(iter(self.held.values()))
        if held is None:
            served = ", ".join(version[:12] for version in self.held)
            raise ModelMismatch(f"this worker serves {served}, not {requested}")
        busy = self.outstanding_texts
        if chunk.priority == wire.Priority.SHADOW and busy:
            raise Overloaded(
                f"shadow work runs only on an idle worker ({busy} texts queued or running)",
                retry_after_s=held.batcher.service_time.seconds,
            )
        return held

    async def embed(self, chunk: wire.EmbedChunk) -> wire.ChunkResult:
        held = self._accept(chunk)
        backend = held.model.backend
        if backend.kind != "embedding":
            raise ValidationFailed("this worker serves a cross-encoder; use /internal/score")
        started = time.perf_counter()
        with span("tokenize", {"headway.texts": len(chunk.texts)}):
            encoded = backend.encode_texts(chunk.texts)
        tokenize_s = time.perf_counter() - started
        timing = RunTiming()
        values = await self._run(held.batcher, encoded, chunk, timing)
        self._timed(tokenize_s, timing)
        return self._result(held.model, values, encoded, timing, per_row=True)

    async def score(self, chunk: wire.ScoreChunk) -> wire.ChunkResult:
        held = self._accept(chunk)
        backend = held.model.backend
        timing = RunTiming()
        started = time.perf_counter()
        with span("tokenize", {"headway.texts": len(chunk.documents) + 1}):
            if backend.kind == "cross-encoder":
                encoded = backend.encode_pairs(chunk.query, chunk.documents)
            else:
                encoded = backend.encode_texts([chunk.query, *chunk.documents])
        tokenize_s = time.perf_counter() - started
        if backend.kind == "cross-encoder":
            scores = await self._run(held.batcher, encoded, chunk, timing)
        else:
            rows = await self._run(held.batcher, encoded, chunk, timing)
            scores = cosine_scores(rows[0], rows[1:])
        self._timed(tokenize_s, timing)
        return self._result(held.model, scores, encoded, timing)

    def _timed(self, tokenize_s: float, timing: RunTiming) -> None:
        """The chunk's durations as metrics, and as spans of its trace where recorded: the
        queue wait, the batch that served it (size, tokens computed, model calls) and,
        within it, the model's run."""
        self.metrics.chunk_timed(tokenize_s, timing.queue_s)
        batch = timing.batch
        if batch is None or not recording():
            return
        now = self._clock()
        queued, started, finished = (
            wall_ns(at, now) for at in (timing.queued_at, timing.started_at, timing.finished_at)
        )
        record("queue", queued, started)
        batch_span = record(
            "batch",
            started,
            finished,
            {
                "headway.batch.texts": batch.texts,
                "headway.batch.tokens": batch.tokens,
                "headway.batch.padded_tokens": batch.padded_tokens,
                "headway.batch.model_calls": batch.calls,
            },
        )
        if batch_span is not None:
            record("model.run", finished - int(batch.seconds * 1e9), finished, parent=batch_span)

    async def _run(
        self, batcher: Batcher, encoded: list[Encoded], chunk: wire.Chunk, timing: RunTiming
    ) -> Values:
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
            values = await outcome
        except DeadlineMissed as exc:
            raise DeadlineExceeded(f"dropped before running: {exc}") from exc
        if chunk.priority != wire.Priority.SHADOW:
            self.completed_texts += len(encoded)
        return values

    @staticmethod
    def _result(
        model: LoadedModel,
        values: Values,
        encoded: list[Encoded],
        timing: RunTiming,
        *,
        per_row: bool = False,
    ) -> wire.ChunkResult:
        """``per_row``: each encoded item is one row (embeddings), so its tokens are sent."""
        values = np.ascontiguousarray(values, dtype="<f4")
        lengths = [item.n_tokens for item in encoded]
        return wire.ChunkResult(
            model_version=model.version,
            values=values.tobytes(),
            rows=values.shape[0],
            dimensions=values.shape[1] if values.ndim == 2 else 1,
            tokens=sum(lengths),
            queue_s=timing.queue_s,
            inference_s=timing.inference_s,
            row_tokens=np.array(lengths, dtype="<u4").tobytes() if per_row else b"",
        )


def cosine_scores(query: Values, documents: Values) -> Values:
    """Rows are L2-normalised, so cosine is a dot product; mapped from [-1, 1] to [0, 1]."""
    return ((documents @ query + 1.0) / 2.0).astype(np.float32)


def build_worker_app(
    service: WorkerService, tracing: ProcessTracing | None = None, *, access_log: bool = False
) -> App:
    """``tracing``: the process's (None: spans not recorded, traces passed on)."""
    tracing = tracing or ProcessTracing()

    async def embed(request: Request) -> Response:
        chunk = _decode(wire.embed_decoder, request.body)
        return _msgpack(await service.embed(chunk), service.completed_texts)

    async def score(request: Request) -> Response:
        chunk = _decode(wire.score_decoder, request.body)
        return _msgpack(await service.score(chunk), service.completed_texts)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        body: dict[str, object] = {"ready": service.ready, "pool": service.pool}
        versions = [
            {
                "version": version,
                "kind": held.model.backend.kind,
                "dimensions": held.model.backend.dimensions,
            }
            for version, held in service.held.items()
        ]
        if versions:
            first = versions[0]
            # workers before several versions answered only these three: old gateways read them
            body |= {
                "model_version": first["version"],
                "kind": first["kind"],
                "dimensions": first["dimensions"],
                "versions": versions,
                "outstanding_texts": service.outstanding_texts,
            }
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
    edge = Edge(
        router,
        max_body_bytes=16 << 20,
        observer=service.metrics,
        tracer=tracing.tracer,
        access_log=access_log,
    )
    return App(
        edge, on_startup=[service.start, tracing.start], on_shutdown=[service.stop, tracing.close]
    )


def _decode(decoder: msgspec.msgpack.Decoder[T], body: bytes) -> T:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"malformed chunk: {exc}") from exc


def _msgpack(result: wire.ChunkResult, completed_texts: int) -> Response:
    return Response(
        wire.encode(result),
        content_type=wire.CONTENT_TYPE,
        headers={wire.COMPLETED_HEADER: str(completed_texts)},
    )
