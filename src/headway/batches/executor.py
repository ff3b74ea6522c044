"""Running batch lines: pull a line, send it through a gateway, keep its answer once.

Lines run as their tenant's batch-tier work through the gateway's own request path
(``submit.py``, ``gateway/batches/lines.py``), so admission lets them take only the
capacity interactive traffic leaves. What comes back decides the line:

    2xx                      its answer goes to the output file
    429 (quota)              wait: the tenant's lines wait out Retry-After, then retry
    503 (shed, no replicas)  the line tries again after a short, growing, jittered
                             pause (the pool sheds batch work first, and has room again
                             within a batch or two), and the send window halves;
                             neither ever fails a line
    401 / 403                this executor's token is wrong: wait, log, never fail a line
    unreachable, 500/502/504 ours: retried with backoff, up to ``max_attempts``, then
                             the answer goes to the error file
    any other 4xx            the line's own fault: its answer goes to the error file

A line's result is recorded once (``store.record``) and only then is its queue item
acked; an executor killed in between leaves the item to be delivered again, and the
next executor finds the result and only acks. Every attempt of a line carries the
line's own request id, so the ledger bills a line once however often it ran.

At most ``lines_in_flight`` lines run at once, and of those at most the send window
(``SendWindow``: halved by a 503, grown by one per window of answers) are at the
gateways at a time, so a pool with room for five lines sees about five, not a stream
of refusals. A line waiting (for quota, for capacity, for a slow answer) keeps its
lease alive by touching it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from headway.batches import output
from headway.batches.inputs import InputMissing, Inputs
from headway.batches.metrics import ExecutorMetrics
from headway.batches.model import FINAL, Batch, LineResult
from headway.batches.offload import off_loop
from headway.batches.queue import Delivery, WorkQueue
from headway.batches.store import BatchStore, UnknownBatch
from headway.batches.submit import UNREACHABLE, Answer, Submitter
from headway.settings import ExecutorSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

WAIT = {429: "quota", 401: "unauthorized", 403: "unauthorized"}
SHED = 503
SHED_PAUSE_S = (0.05, 2.0)
"""A shed line's first pause and its longest (doubling, with jitter, in between)."""
OURS = {UNREACHABLE, 500, 502, 504}
DEFAULT_WAIT_S = 1.0
MAX_WAIT_S = 30.0
PULL_WAIT_S = 1.0
STOP_WAIT_S = 2.0
"""The longest a stopping executor waits for its lines to hand themselves back (a line
not handed back comes back after its lease anyway)."""
BATCH_FRESH_S = 1.0
"""How long a batch's status read here is trusted (a cancel takes effect this late)."""


class Executor:
    def __init__(
        self,
        store: BatchStore,
        queue: WorkQueue,
        inputs: Inputs,
        submitter: Submitter,
        settings: ExecutorSettings,
        metrics: ExecutorMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store, self._queue, self._inputs = store, queue, inputs
        self._submitter, self._settings, self._metrics = submitter, settings, metrics
        self._clock = clock
        self._gates: dict[str, float] = {}
        """Until when (clock) lines behind each gate wait: ``tenant:…`` after a 429,
        ``auth`` after a 401/403."""
        self._batches: dict[str, tuple[float, Batch | None]] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._committer = Committer(store, queue)
        self._window = SendWindow(settings.lines_in_flight)

    async def run(self) -> None:
        """Pull and run lines until cancelled; on the way out, hand back what was running."""
        room = asyncio.Event()
        try:
            while True:
                free = self._settings.lines_in_flight - len(self._running)
                if free <= 0:
                    room.clear()
                    await room.wait()
                    self._metrics.in_flight.set(len(self._running))
                    continue
                for delivery in await self._to_run(await self._queue.pull(free, PULL_WAIT_S)):
                    task = asyncio.ensure_future(self._handle(delivery))
                    self._running.add(task)
                    task.add_done_callback(self._running.discard)
                    task.add_done_callback(lambda _: room.set())
                self._metrics.in_flight.set(len(self._running))
        finally:
            for task in list(self._running):
                task.cancel()
            if self._running:  # each hands its line back; none may hold the stop up for long
                await asyncio.wait(set(self._running), timeout=STOP_WAIT_S)

    async def _to_run(self, pulled: list[Delivery]) -> list[Delivery]:
        """The pulled lines that still need running; the rest are acked here: their batch
        ended or is gone, or they have a result already (an executor died before its ack)."""
        to_run: list[Delivery] = []
        done: list[Delivery] = []
        for batch_id, group in _by_batch(pulled).items():
            batch = await self._batch(batch_id)
            if batch is None or batch.status in FINAL or batch.status == "cancelling":
                done += group
                continue
            answered = await off_loop(self._store.recorded, batch_id, [d.item.line for d in group])
            for delivery in group:
                (done if delivery.item.line in answered else to_run).append(delivery)
        if done:
            self._metrics.line("skipped", len(done))
            await self._queue.ack_all(done)
        return to_run

    async def _handle(self, delivery: Delivery) -> None:
        try:
            await self._run_line(delivery)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # stopping: let another executor have it now
                await asyncio.wait_for(asyncio.shield(delivery.nak(0.0)), STOP_WAIT_S)
            raise
        except Exception:
            log.exception(
                "line %d of %s failed here; it will be delivered again",
                delivery.item.line,
                delivery.item.batch_id,
            )
            with contextlib.suppress(Exception):
                await delivery.nak(DEFAULT_WAIT_S)

    async def _run_line(self, delivery: Delivery) -> None:
        item = delivery.item
        batch = await self._batch(item.batch_id)
        try:
            line = None if batch is None else (await self._inputs.of(batch)).lines.get(item.line)
        except InputMissing:
            line = None
        if batch is None or line is None:  # its input is gone: its batch's mover ends it
            self._metrics.line("skipped")
            await delivery.ack()
            return
        result = await self._answer(batch, line.number, line.custom_id, line.body, delivery)
        if result is None:  # its batch ended (cancelled, expired, deleted) while it waited
            self._metrics.line("skipped")
            await delivery.ack()
            return
        await self._committer.commit(batch.id, result, delivery)
        self._metrics.line("completed" if result.ok else "failed")

    async def _answer(
        self, batch: Batch, line: int, custom_id: str, body: bytes, delivery: Delivery
    ) -> LineResult | None:
        """The line's result; None if its batch ended while it waited to run again."""
        failures = shed = 0
        gates = (f"tenant:{batch.tenant}", "auth")
        while True:
            await self._leased(delivery, self._wait_gates(gates))
            if failures or shed or any(self._gates.get(gate, 0.0) for gate in gates):
                now = await self._batch(batch.id)
                if now is None or now.status in FINAL or now.status == "cancelling":
                    return None
            await self._leased(delivery, self._window.acquire())
            try:
                answer = await self._leased(delivery, self._submitter.submit(batch, line, body))
            finally:
                self._window.release()
            status = answer.status
            self._window.answered(shed=status == SHED)
            if 200 <= status < 300:
                data = output.answered(
                    batch.id, line, custom_id, status, answer.request_id, answer.body
                )
                return LineResult(line, True, data)
            if status == SHED:
                shed += 1
                self._metrics.waited("overloaded")
                first, most = SHED_PAUSE_S
                pause = min(most, first * 2 ** min(shed - 1, 10)) * random.uniform(0.5, 1.0)
                await self._leased(delivery, asyncio.sleep(pause))
                continue
            reason = WAIT.get(status)
            if reason is not None:
                self._close(gates[_GATE_OF[reason]], answer)
                self._metrics.waited(reason)
                if reason == "unauthorized":
                    log.error(
                        "the gateway refused the executor's token (%d): check "
                        "batches.executor_token on both",
                        status,
                    )
                continue
            if status in OURS:
                failures += 1
                self._metrics.retried()
                if failures < self._settings.max_attempts:
                    await self._leased(delivery, asyncio.sleep(min(MAX_WAIT_S, 0.5 * 2**failures)))
                    continue
            if status == UNREACHABLE:
                data = output.not_run(
                    batch.id,
                    line,
                    custom_id,
                    "gateway_unreachable",
                    "no gateway answered after several attempts",
                )
            else:
                data = output.answered(
                    batch.id, line, custom_id, status, answer.request_id, answer.body
                )
            return LineResult(line, False, data)

    def _close(self, gate: str, answer: Answer) -> None:
        wait_s = min(MAX_WAIT_S, answer.retry_after_s or DEFAULT_WAIT_S)
        self._gates[gate] = max(self._gates.get(gate, 0.0), self._clock() + wait_s)

    async def _wait_gates(self, gates: tuple[str, ...]) -> None:
        while True:
            until = max(self._gates.get(gate, 0.0) for gate in gates)
            wait_s = until - self._clock()
            if wait_s <= 0:
                return
            await asyncio.sleep(wait_s)

    async def _leased(self, delivery: Delivery, work: Awaitable[T]) -> T:
        """``work``, touching the delivery's lease meanwhile so no one else takes it."""
        task = asyncio.ensure_future(work)
        every_s = self._queue.lease_s / 3
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=every_s)
                if done:
                    return task.result()
                await delivery.touch()
        finally:
            task.cancel()

    async def _batch(self, batch_id: str) -> Batch | None:
        now = self._clock()
        seen = self._batches.get(batch_id)
        if seen is not None and now - seen[0] < BATCH_FRESH_S:
            return seen[1]
        batch = await off_loop(self._store.batch_by_id, batch_id)
        self._batches[batch_id] = (now, batch)
        if len(self._batches) > 1024:
            self._batches = {k: v for k, v in self._batches.items() if now - v[0] < BATCH_FRESH_S}
        return batch


_GATE_OF = {"quota": 0, "unauthorized": 1}


class SendWindow:
    """How many lines may be at the gateways at once: up to ``most``, halved by each 503
    (the pool had no room for batch work), grown by one per window of answers (additive
    increase, multiplicative decrease, as TCP's congestion window). Lines beyond it wait
    here, rather than each costing the gateway a refusal and retrying blind."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.size = float(most)
        self.sending = 0
        self._freed = asyncio.Event()

    async def acquire(self) -> None:
        while self.sending >= max(1, int(self.size)):
            self._freed.clear()
            await self._freed.wait()
        self.sending += 1

    def release(self) -> None:
        self.sending -= 1
        self._freed.set()

    def answered(self, *, shed: bool) -> None:
        if shed:
            self.size = max(1.0, self.size / 2)
        else:
            self.size = min(float(self.most), self.size + 1 / self.size)


def _by_batch(deliveries: list[Delivery]) -> dict[str, list[Delivery]]:
    groups: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        groups.setdefault(delivery.item.batch_id, []).append(delivery)
    return groups


class Committer:
    """Finished lines, kept and acked together: every line finished while the last
    commit ran goes into the next one (one transaction of results per batch, then one
    of acks), as the usage outbox groups its writes. ``commit`` returns once its line
    is kept and acked, in that order."""

    def __init__(self, store: BatchStore, queue: WorkQueue) -> None:
        self._store, self._queue = store, queue
        self._pending: list[tuple[str, LineResult, Delivery, asyncio.Future[None]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def commit(self, batch_id: str, result: LineResult, delivery: Delivery) -> None:
        done = asyncio.get_running_loop().create_future()
        self._pending.append((batch_id, result, delivery, done))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        await done

    async def _flush(self) -> None:
        while self._pending:
            taken, self._pending = self._pending, []
            try:
                groups: dict[str, list[LineResult]] = {}
                for batch_id, result, _, _ in taken:
                    groups.setdefault(batch_id, []).append(result)
                for batch_id, results in groups.items():
                    with contextlib.suppress(UnknownBatch):  # deleted with its tenant
                        await off_loop(self._store.record_many, batch_id, results)
                await self._queue.ack_all([delivery for _, _, delivery, _ in taken])
            except BaseException as exc:  # each line hears of it (a stop cancels this too)
                for *_, done in taken:
                    if done.done():
                        continue
                    if isinstance(exc, Exception):
                        done.set_exception(exc)
                    else:
                        done.cancel()
                if not isinstance(exc, Exception):
                    raise
            else:
                for *_, done in taken:
                    if not done.done():
                        done.set_result(None)
