"""The worker's queue and dynamic batcher.

One owner task takes chunks from a heap ordered by priority (the lower number
first: interactive before batch), then by deadline (earliest first); a batch of
only background work (batch tier, shadow) is kept small, so interactive work that
arrives meanwhile waits little (``max_background_batch_size``),
waits for a batch to fill only when the model was idle and a wait is expected to pay
(``fill.adaptive_wait_s``: work arriving, a per-call cost to share; never more than
``max_wait_s``), drops chunks whose deadline has passed or cannot be met by the
current service-time estimate, skips chunks whose caller has left, and runs each
batch on the single inference thread.
Submitting never blocks: a chunk that would overflow the queue bound (counted
in texts) is refused at once with ``QueueFull``, a value, not an exception.
If a batch fails, every chunk in it gets the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from headway.background import Background
from headway.models.backend import Backend, Encoded
from headway.worker.estimates import ArrivalRate, CostFit
from headway.worker.fill import Queued, adaptive_wait_s, fixed_wait_s
from headway.worker.planning import padded_tokens, plan_runs

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
BatchWait = Literal["adaptive", "fixed"]
Values = npt.NDArray[np.float32]


class DeadlineMissed(Exception):
    """The chunk was dropped: its deadline passed, or could not be met, before it ran."""


@dataclass(frozen=True, slots=True)
class QueueFull:
    """The queue cannot take these texts now."""

    queued_texts: int
    max_queue_texts: int


class BatchObserver(Protocol):
    def batch_done(self, batch: BatchRun) -> None: ...
    def dropped(self, reason: str, texts: int) -> None: ...
    def queue_depth(self, texts: int) -> None: ...


class NoObserver:
    def batch_done(self, batch: BatchRun) -> None:
        pass

    def dropped(self, reason: str, texts: int) -> None:
        pass

    def queue_depth(self, texts: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class BatchRun:
    """One batch the model ran: its texts, their real tokens, the model calls it was split
    into by length, the tokens computed (padding included) and the calls' seconds."""

    texts: int
    tokens: int
    calls: int
    padded_tokens: int
    seconds: float

    @property
    def padding_ratio(self) -> float:
        """The share of the computed tokens that were padding."""
        return 1.0 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0


@dataclass(slots=True)
class RunTiming:
    """When a chunk was queued, and when the batch that served it ran (batcher's clock);
    ``batch``: that batch (its last, for a chunk run in pieces)."""

    queued_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    batch: BatchRun | None = None

    @property
    def queue_s(self) -> float:
        return max(0.0, self.started_at - self.queued_at)

    @property
    def inference_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)


@dataclass(order=True, slots=True)
class _Job:
    priority: int
    deadline: float
    seq: int
    queued_at: float = field(compare=False)
    encoded: list[Encoded] = field(compare=False)
    future: asyncio.Future[Values] = field(compare=False)
    timing: RunTiming | None = field(default=None, compare=False)
    taken: int = field(default=0, compare=False)
    """Rows handed to batches so far (a background job may run in pieces)."""
    done: list[Values] = field(default_factory=list, compare=False)
    """The rows of its pieces that ran, in order."""


@dataclass(slots=True)
class _Piece:
    """Rows ``start:stop`` of a job, in one batch."""

    job: _Job
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_batch_size: int = 32
    max_background_batch_size: int = 32
    """While interactive work is about (some arrived in the last ``interactive_quiet_s``),
    the most background texts (batch tier, shadow) one model call holds: an interactive
    chunk that arrives waits behind this many at most. Background chunks larger than
    this run in pieces."""
    interactive_quiet_s: float = 1.0
    max_batch_tokens: int = 8192
    max_wait_s: float = 0.002
    """The longest a batch waits to fill, counted from its oldest arrival."""
    batch_wait: BatchWait = "adaptive"
    """``adaptive``: wait only as long as it is expected to pay (``fill``); ``fixed``: wait
    up to ``max_wait_s`` whenever the batch is not full."""
    max_queue_texts: int = 1024


class ServiceTime:
    """Exponentially weighted mean of how long one batch takes to run."""

    def __init__(self, initial_s: float = 0.0, weight: float = 0.2) -> None:
        self.seconds = initial_s
        self._weight = weight

    def observe(self, seconds: float) -> None:
        self.seconds += self._weight * (seconds - self.seconds)


class Batcher:
    def __init__(
        self,
        backend: Backend,
        limits: BatchLimits,
        *,
        clock: Clock = time.monotonic,
        observer: BatchObserver | None = None,
        executor: ThreadPoolExecutor | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """``executor``: the inference thread, when the worker shares one between the
        batchers of the versions it holds (theirs to shut down, not this batcher's);
        ``sleep``: how a batch-fill wait passes (tests pass one on their own clock)."""
        self._backend = backend
        self._limits = limits
        self._clock = clock
        self._sleep = sleep
        self._observer = observer or NoObserver()
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._queued_texts = 0
        self._running_texts = 0
        self._interactive_at = float("-inf")
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="inference"
        )
        self._task: asyncio.Task[None] | None = None
        self.service_time = ServiceTime()
        self.arrivals = ArrivalRate()
        self.cost = CostFit()

    @property
    def queued_texts(self) -> int:
        return self._queued_texts

    @property
    def outstanding_texts(self) -> int:
        return self._queued_texts + self._running_texts

    def start(self, background: Background) -> None:
        """Run the owner task; it must not die while the worker serves (``essential``)."""
        self._task = background.essential("batcher", self._loop)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        _fail(self._heap, DeadlineMissed("worker is shutting down"))
        self._heap.clear()
        if self._owns_executor:
            self._executor.shutdown(wait=True)

    async def drained(self) -> None:
        """Wait until nothing is queued or running."""
        await self._idle.wait()

    async def run_now(self, encoded: Sequence[Encoded]) -> Values:
        """Run one batch directly on the inference thread (warm-up); times it."""
        started = self._clock()
        values, _ = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._compute, list(encoded)
        )
        self._observe_run(len(encoded), self._clock() - started)
        return values

    def submit(
        self,
        encoded: list[Encoded],
        deadline: float,
        priority: int = 0,
        timing: RunTiming | None = None,
    ) -> asyncio.Future[Values] | QueueFull:
        """Queue the chunk; it runs after every queued chunk of a lower ``priority``
        number, and after those of its own priority with an earlier deadline.
        ``timing``, when given, is filled in: queued now, and when its batch ran."""
        texts = len(encoded)
        if self._queued_texts + texts > self._limits.max_queue_texts:
            return QueueFull(self._queued_texts, self._limits.max_queue_texts)
        future: asyncio.Future[Values] = asyncio.get_running_loop().create_future()
        now = self._clock()
        if timing is not None:
            timing.queued_at = now
        job = _Job(priority, deadline, next(self._seq), now, encoded, future, timing)
        if priority == 0:
            self._interactive_at = now
        self.arrivals.observe(now, texts)
        heapq.heappush(self._heap, job)
        self._queued_texts += texts
        self._idle.clear()
        self._observer.queue_depth(self._queued_texts)
        self._wakeup.set()
        return future

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        ran = False  # whether what is queued gathered while the model ran a batch
        while True:
            if not self._heap:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                ran = False
            if not ran:
                await self._fill()
            pieces = self._take()
            ran = bool(pieces)
            if not pieces:
                continue
            encoded = [item for p in pieces for item in p.job.encoded[p.start : p.stop]]
            self._running_texts = len(encoded)
            started = self._clock()
            try:
                values, batch = await loop.run_in_executor(self._executor, self._compute, encoded)
            except asyncio.CancelledError:
                _fail((p.job for p in pieces), DeadlineMissed("worker is shutting down"))
                raise
            except Exception as exc:  # the backend failed: every waiter hears of it
                _fail((p.job for p in pieces), exc)
                continue
            finally:
                self._running_texts = 0
            finished = self._clock()
            self._observe_run(len(encoded), finished - started)
            offset = 0
            for piece in pieces:
                job, size = piece.job, piece.stop - piece.start
                rows = values[offset : offset + size]
                offset += size
                if job.timing is not None:
                    if piece.start == 0:
                        job.timing.started_at = started
                    job.timing.finished_at = finished
                    job.timing.batch = batch
                if piece.stop < len(job.encoded):
                    job.done.append(rows)  # more pieces to come
                elif not job.future.done():
                    job.future.set_result(np.concatenate([*job.done, rows]) if job.done else rows)

    def _observe_run(self, texts: int, seconds: float) -> None:
        self.service_time.observe(seconds)
        self.cost.observe(texts, seconds)

    async def _fill(self) -> None:
        """On an idle model, wait while the policy says waiting pays: until it says run
        (asked again on each arrival), or until a wait passes with nothing new."""
        while (wait_s := self._wait_s()) > 0:
            self._wakeup.clear()
            arrival = asyncio.ensure_future(self._wakeup.wait())
            timer = asyncio.ensure_future(self._sleep(wait_s))
            try:
                done, _ = await asyncio.wait((arrival, timer), return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrival.cancel()
                timer.cancel()
            if arrival not in done:
                return

    def _wait_s(self) -> float:
        """Seconds to wait for more work before running what is queued (``fill``)."""
        limits = self._limits
        queued = Queued(
            self._queued_texts,
            min(job.queued_at for job in self._heap),
            min(job.deadline for job in self._heap),
        )
        now = self._clock()
        if limits.batch_wait == "fixed":
            return fixed_wait_s(now, queued, limits.max_batch_size, limits.max_wait_s)
        return adaptive_wait_s(
            now,
            queued,
            self.arrivals.texts_per_s,
            self.cost.cost,
            limits.max_batch_size,
            limits.max_wait_s,
        )

    def _take(self) -> list[_Piece]:
        """The next batch in queue order, dropping what cannot be served in time.

        Interactive chunks go whole, up to ``max_batch_size``. While interactive work is
        about, background texts fill a batch only up to ``max_background_batch_size``
        (a background chunk larger than that runs in pieces, its rows put together
        before it is answered); with none about, they fill it as interactive ones do."""
        now = self._clock()
        expected_done = now + self.service_time.seconds
        limits = self._limits
        background_cap = limits.max_batch_size
        if now - self._interactive_at < limits.interactive_quiet_s:
            background_cap = min(background_cap, limits.max_background_batch_size)
        pieces: list[_Piece] = []
        texts = 0
        while self._heap:
            job = self._heap[0]
            left = len(job.encoded) - job.taken
            if job.priority == 0:
                if pieces and texts + left > limits.max_batch_size:
                    break
                size = left
            else:
                room = background_cap - texts
                if room <= 0:
                    break
                size = min(left, room)
            if job.taken and job.future.done():  # an earlier piece failed
                heapq.heappop(self._heap)
                self._queued_texts -= left
                continue
            if job.taken == 0 and not self._runnable(job, now, expected_done):
                heapq.heappop(self._heap)
                self._queued_texts -= left
                continue
            pieces.append(_Piece(job, job.taken, job.taken + size))
            job.taken += size
            texts += size
            self._queued_texts -= size
            if job.taken == len(job.encoded):
                heapq.heappop(self._heap)
        self._observer.queue_depth(self._queued_texts)
        return pieces

    def _runnable(self, job: _Job, now: float, expected_done: float) -> bool:
        """False (and the job answered) if its caller left or its deadline cannot be met."""
        size = len(job.encoded)
        if job.future.done():
            self._observer.dropped("caller_left", size)
            return False
        if job.deadline <= expected_done:
            reason = "expired" if job.deadline <= now else "cannot_finish"
            self._observer.dropped(reason, size)
            job.future.set_exception(DeadlineMissed(reason))
            return False
        return True

    def _compute(self, encoded: list[Encoded]) -> tuple[Values, BatchRun]:
        """On the inference thread: split by length into model calls, reassemble in order."""
        lengths = [item.n_tokens for item in encoded]
        runs = plan_runs(lengths, self._limits.max_batch_tokens, self._backend.call_overhead_tokens)
        started = time.perf_counter()
        out: Values | None = None
        for run in runs:
            values = self._backend.run([encoded[i] for i in run])
            if out is None:
                out = np.empty((len(encoded), *values.shape[1:]), dtype=np.float32)
            out[run] = values
        assert out is not None
        seconds = time.perf_counter() - started
        batch = BatchRun(
            len(encoded), sum(lengths), len(runs), padded_tokens(lengths, runs), seconds
        )
        self._observer.batch_done(batch)
        return out, batch


def _fail(jobs: Iterable[_Job], exc: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(exc)
