"""The worker's HTTP face: internal chunk endpoints, health, readiness, metrics.

A worker holds every version its ``ModelSource`` wants, each with its own loaded
backend and ``Batcher`` (its own queue), all running on the worker's one inference
thread: a replica is as fast with two versions as with one, and a shadow batch never
runs beside real work on another core. It also serves the source's ``on_demand``
versions: the first chunk for one starts its load (in a thread, one load per version
however many chunks ask) and waits for it within its deadline; beyond
``memory_budget_bytes`` of artifacts, a load unloads the least recently used idle
versions loaded on demand (never one wanted from the start).

Readiness comes only after each wanted version is loaded and a warm-up batch has run;
while the source cannot read the model registry (its Postgres away:
``RegistryUnavailable``), the start waits with backoff (``headway.dependency_link``,
``headway_worker_registry_up``) rather than exits. Every ``registry_poll_s`` the worker
reads the source's change counter; when it moved, it loads (in a thread, off the event
loop) and warms up what is newly wanted before advertising it, stops taking chunks for
what is no longer served, and unloads that once its queue is empty. A chunk is served by
the version it names (``ModelMismatch`` if not served; none named: the first wanted).
Shadow chunks run only in spare capacity: taken only while the worker is idle (a batcher
drains its queue into each batch, so an empty queue is not idleness), refused at once
otherwise; a real chunk arriving meanwhile waits at most that one batch. On shutdown
the worker turns unready first, then finishes its queues.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
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
from headway.models.errors import InputRefused
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
from headway.worker.sources import LoadedModel, ModelSource, VersionInfo

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
        memory_budget_bytes: int | None = None,
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
        """Versions loaded."""
        self.default_version = ""
        """What a chunk naming no version gets: the first wanted."""
        self.wanted: tuple[str, ...] = ()
        """Versions held from the start, never unloaded for the budget."""
        self.on_demand: tuple[str, ...] = ()
        """Versions served too, loaded when first asked for."""
        self.info: Mapping[str, VersionInfo] = {}
        self.retiring: list[Held] = []
        """Versions no longer served, unloaded once their queue is empty."""
        self._memory_budget_bytes = memory_budget_bytes
        self._loading: dict[str, asyncio.Task[Held]] = {}
        self._last_used: dict[str, float] = {}
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
            "worker ready: pool=%s versions=%s (%d more on demand) in %.1fs",
            self.pool,
            ",".join(version[:12] for version in self.held),
            len(self.on_demand),
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
        for task in self._loading.values():
            task.cancel()
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
            self.metrics.model_unloaded("retired", len(self.held))
            log.info("worker unloaded version %s", held.model.version[:12])

    async def _sync(self) -> None:
        """Hold exactly the versions wanted now: new ones loaded and warmed before they are
        served; if one fails to load, those loaded stay and the next poll tries again.
        Versions loaded on demand stay loaded while they are still served."""
        wanted = await asyncio.to_thread(self._source.wanted)
        for version in wanted.versions:
            if version not in self.held:
                self.held[version] = self._revived(version) or await self._load(version)
        served = {*wanted.versions, *wanted.on_demand}
        self.retiring += [held for version, held in self.held.items() if version not in served]
        self.held = {version: held for version, held in self.held.items() if version in served}
        self.default_version = wanted.versions[0]
        self.wanted, self.on_demand, self.info = wanted.versions, wanted.on_demand, wanted.info
        self._changes = wanted.changes

    def _revived(self, version: str) -> Held | None:
        """A retired version wanted again before its queue emptied: it is still loaded."""
        for held in self.retiring:
            if held.model.version == version:
                self.retiring.remove(held)
                return held
        return None

    async def _held_for(self, version: str, deadline: float) -> Held:
        """The loaded ``version``, loading it first if it is served on demand; the wait
        ends at ``deadline`` (the load goes on, for the chunks after)."""
        while (held := self.held.get(version)) is None:
            if version not in self.on_demand:
                served = ", ".join(v[:12] for v in (*self.wanted, *self.on_demand))
                raise ModelMismatch(f"this worker serves {served}, not {version}")
            task = self._loading.get(version)
            if task is None:
                task = asyncio.create_task(self._load_on_demand(version))
                self._loading[version] = task
                task.add_done_callback(functools.partial(self._loaded, version))
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.0, deadline - self._clock()))
            except TimeoutError:
                raise DeadlineExceeded(f"version {version[:12]} is still loading") from None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the load's own error, logged once by ``_loaded``
                raise NoReplicas(f"version {version[:12]} failed to load here: {exc}") from exc
        self._last_used[version] = self._clock()
        return held

    def _loaded(self, version: str, task: asyncio.Task[Held]) -> None:
        if self._loading.get(version) is task:
            del self._loading[version]
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("worker could not load version %s: %s", version[:12], error)

    async def _load_on_demand(self, version: str) -> Held:
        held = self._revived(version) or await self._load(version, trigger="demand")
        if version not in (*self.wanted, *self.on_demand):  # no longer served meanwhile
            self.retiring.append(held)
            return held
        self.held[version] = held
        self._last_used[version] = self._clock()
        await self._unload_beyond_budget(keep=version)
        return held

    async def _unload_beyond_budget(self, keep: str) -> None:
        """Least recently used first, idle versions loaded on demand, until the loaded
        artifacts fit ``memory_budget_bytes`` (or none is left to unload)."""
        if self._memory_budget_bytes is None:
            return

        def size(version: str) -> int:
            info = self.info.get(version)
            return info.size_bytes if info is not None else 0

        total = sum(size(version) for version in self.held)
        idle = [
            version
            for version, held in self.held.items()
            if version != keep
            and version not in self.wanted
            and held.batcher.outstanding_texts == 0
        ]
        for version in sorted(idle, key=lambda v: self._last_used.get(v, 0.0)):
            if total <= self._memory_budget_bytes:
                break
            held = self.held.pop(version)
            total -= size(version)
            await held.batcher.close()
            self.metrics.model_unloaded("budget", len(self.held))
            log.info("worker unloaded version %s (memory budget)", version[:12])

    async def _load(self, version: str, trigger: str = "start") -> Held:
        started = time.perf_counter()
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
        seconds = time.perf_counter() - started
        self.metrics.model_loaded(trigger, seconds, len(self.held) + 1)
        log.info("worker loaded version %s (%s) in %.2fs", version[:12], backend.kind, seconds)
        return Held(model, batcher)

    # requests ----------------------------------------------------------------

    def served_versions(self) -> list[dict[str, object]]:
        """Every version served, the default first, and whether it is loaded now."""
        described: list[dict[str, object]] = []
        for version in dict.fromkeys((*self.wanted, *self.held, *self.on_demand)):
            held = self.held.get(version)
            info = self.info.get(version)
            kind: str
            if held is not None:
                kind, dimensions = held.model.backend.kind, held.model.backend.dimensions
            elif info is not None:
                kind, dimensions = info.kind, info.dimensions
            else:
                continue
            described.append(
                {"version": version, "kind": kind, "dimensions": dimensions, "loaded": bool(held)}
            )
        return described

    @property
    def outstanding_texts(self) -> int:
        return sum(h.batcher.outstanding_texts for h in [*self.held.values(), *self.retiring])

    async def _accept(self, chunk: wire.Chunk) -> Held:
        """The version that serves ``chunk`` (loaded first if it is served on demand), once
        it may run here; every refusal comes before the chunk is tokenized (no work spent
        on what is refused)."""
        held = await self._serving(chunk.model_version, chunk.timeout_ms)
        busy = self.outstanding_texts
        if chunk.priority == wire.Priority.SHADOW and busy:
            raise Overloaded(
                f"shadow work runs only on an idle worker ({busy} texts queued or running)",
                retry_after_s=held.batcher.service_time.seconds,
            )
        return held

    async def _serving(self, version: str, timeout_ms: float) -> Held:
        """``version`` (none: the default) loaded, if this worker may serve it now."""
        if not self.ready or not self.held:
            raise NoReplicas("worker is not ready")
        if timeout_ms <= 0:
            raise DeadlineExceeded("deadline passed before the chunk arrived")
        deadline = self._clock() + timeout_ms / 1000
        return await self._held_for(version or self.default_version, deadline)

    async def tokenize(self, chunk: wire.TokenizeChunk) -> wire.TokenizeResult:
        """On the event loop, as a chunk's tokenizing is: the gateway bounds its size."""
        held = await self._serving(chunk.model_version, chunk.timeout_ms)
        tokens = held.model.backend.tokens(chunk.texts, chunk.add_special_tokens)
        return wire.TokenizeResult(held.model.version, tokens)

    async def decode(self, chunk: wire.DecodeChunk) -> wire.DecodeResult:
        held = await self._serving(chunk.model_version, chunk.timeout_ms)
        with _input_refused():
            texts = held.model.backend.decode(chunk.ids, chunk.skip_special_tokens)
        return wire.DecodeResult(held.model.version, texts)

    async def embed(self, chunk: wire.EmbedChunk) -> wire.ChunkResult:
        held = await self._accept(chunk)
        backend = held.model.backend
        if backend.kind != "embedding":
            raise ValidationFailed("this worker serves a cross-encoder; use /internal/score")
        started = time.perf_counter()
        with span("tokenize", {"headway.texts": len(chunk.texts)}), _input_refused():
            encoded = backend.encode_texts(chunk.texts, chunk.truncation)
        tokenize_s = time.perf_counter() - started
        timing = RunTiming()
        values = await self._run(held.batcher, encoded, chunk, timing)
        self._timed(tokenize_s, timing)
        return self._result(held.model, values, encoded, timing, per_row=True)

    async def score(self, chunk: wire.ScoreChunk) -> wire.ChunkResult:
        held = await self._accept(chunk)
        backend = held.model.backend
        timing = RunTiming()
        started = time.perf_counter()
        with span("tokenize", {"headway.texts": len(chunk.documents) + 1}), _input_refused():
            if backend.kind == "cross-encoder":
                encoded = backend.encode_pairs(chunk.query, chunk.documents, chunk.truncation)
            else:
                encoded = backend.encode_texts([chunk.query, *chunk.documents], chunk.truncation)
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


@contextmanager
def _input_refused() -> Iterator[None]:
    """An input the model cannot take as asked is the request's fault: 422, its words."""
    try:
        yield
    except InputRefused as exc:
        raise ValidationFailed(str(exc)) from exc


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

    async def tokenize(request: Request) -> Response:
        chunk = _decode(wire.tokenize_decoder, request.body)
        body = wire.encode(await service.tokenize(chunk))
        return Response(body, content_type=wire.CONTENT_TYPE)

    async def decode(request: Request) -> Response:
        chunk = _decode(wire.decode_decoder, request.body)
        body = wire.encode(await service.decode(chunk))
        return Response(body, content_type=wire.CONTENT_TYPE)

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        body: dict[str, object] = {"ready": service.ready, "pool": service.pool}
        versions = service.served_versions()
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
            Route("POST", wire.TokenizeChunk.path, "tokenize", tokenize),
            Route("POST", wire.DecodeChunk.path, "decode", decode),
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
