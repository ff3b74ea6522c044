"""Running batch lines: pull a line, send it through a gateway, keep its answer once.

Lines run as their tenant's batch-tier work through the gateway's request path
(``submit.py``), so admission gives them only what interactive traffic leaves. The answer
decides the line:

    2xx                     the answer to the output file
    429 + Retry-After       requeued for that long; no more of the tenant's lines pulled meanwhile
    429, no Retry-After     it can never pass (over the tenant's burst): the error file
    503                     tried again after a growing, jittered pause; the send window halves
    401 / 403               this executor's token is wrong: wait and log
    409 line_not_live       its batch ended: skipped, once a fresh read of the batch agrees
    unreachable/500/502/504 retried with backoff up to ``max_attempts``, then the error file
    other 4xx               the error file

503 and 401/403 never fail a line. A result is recorded (``store.record``) before its item
is acked, so a line whose executor died in between is delivered again and only acked; every
attempt carries the line's request id, so the ledger bills it once. The store or queue away
(``links.py``): lines are handed back and the loop backs off; it never exits for it.

At most ``lines_in_flight`` lines run, ``max_lines_in_flight_per_tenant`` of one tenant
(``queue.Room``); the executor pulls again when a line ends or after ``BUSY_PULL_S``, and
the send window (``window.py``) bounds how many are at the gateways. A waiting line touches
its lease. Per-tenant state is keyed by tenant id; a batch no gateway has adopted yet
(``LEGACY_TENANT_ID``) is nobody's: its lines go back for ``UNADOPTED_WAIT_S``.

A stop is a cancel of ``run``: each running line naks itself, given ``STOP_WAIT_S``. Under
Python 3.11 a JetStream pull cancelled as its message arrives swallows the cancel
(``cancellation.py``), so ``run`` (each turn and after each pull) and every wait of a line
(``_leased``) check whether a stop was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from headway.batches import output
from headway.batches.inputs import InputMissing, Inputs
from headway.batches.links import AWAY, ExecutorLinks
from headway.batches.metrics import ExecutorMetrics
from headway.batches.model import FINAL, LEGACY_TENANT_ID, Batch, LineResult
from headway.batches.offload import off_loop
from headway.batches.queue import Delivery, Room, WorkQueue
from headway.batches.store import BatchStore, UnknownBatch
from headway.batches.submit import UNREACHABLE, Submitter
from headway.batches.window import SendWindow
from headway.cancellation import cancel_requested, raise_if_cancel_requested
from headway.settings import ExecutorSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

QUOTA = 429
UNAUTHORIZED = (401, 403)
NOT_LIVE = (409, "line_not_live")
"""The gateway's answer to a line whose batch runs no more lines (``LineNotLive``)."""
SHED = 503
SHED_PAUSE_S = (0.05, 2.0)
"""A shed line's first pause and its longest (doubling, with jitter, in between)."""
OURS = {UNREACHABLE, 500, 502, 504}
DEFAULT_WAIT_S = 1.0
MAX_WAIT_S = 30.0
PULL_WAIT_S = 1.0
"""How long an idle executor's pull waits for a line."""
BUSY_PULL_S = 0.25
"""With lines running and slots free but nothing pulled, how long until the next look
(sooner when a line ends): a tenant's first line waits at most about this for a slot."""
STOP_WAIT_S = 2.0
"""The longest a stopping executor waits for its lines to hand themselves back (a line
not handed back comes back after its lease anyway)."""
BATCH_FRESH_S = 1.0
"""How long a batch's status read here is trusted (a cancel takes effect this late)."""
UNADOPTED_WAIT_S = 5.0
"""How long a line of a batch not yet adopted by its tenant goes back to the queue for."""


@dataclass(frozen=True, slots=True)
class Later:
    """The line goes back to the queue for ``delay_s`` (its tenant's quota is short)."""

    delay_s: float


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
        links: ExecutorLinks | None = None,
    ) -> None:
        """``links``: the store's and the queue's reachability, shared with the service that
        reports it (default: the executor's own)."""
        self._store, self._queue, self._inputs = store, queue, inputs
        self._links = links or ExecutorLinks.of(metrics)
        self._submitter, self._settings, self._metrics = submitter, settings, metrics
        self._clock = clock
        self._quota_gates: dict[int, float] = {}
        """Tenant id → until when (clock) its lines go back to the queue rather than run (a
        429)."""
        self._auth_gate = 0.0
        """Until when every line waits (clock): a 401/403 said this executor's token is wrong."""
        self._held: Counter[int] = Counter()
        """Lines in flight here, by the tenant id their queue items name."""
        self._batches: dict[str, tuple[float, Batch | None]] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._committer = Committer(store, queue, self._links)
        self._window = SendWindow(settings.lines_in_flight)

    async def run(self) -> None:
        """Pull and run lines until cancelled; on the way out, hand back what was running."""
        ended = asyncio.Event()  # a line ended: its slot, and its tenant's room, are free
        try:
            while True:
                raise_if_cancel_requested()  # a stop swallowed below (cancellation.py)
                free = self._settings.lines_in_flight - len(self._running)
                ended.clear()
                if free <= 0:
                    await ended.wait()
                    continue
                busy = bool(self._running)
                wait_s = 0.0 if busy else PULL_WAIT_S  # busy: look, then wait for an end
                pulled: list[Delivery] = []
                try:
                    pulled = await self._queue.pull(free, wait_s, self._room())
                    to_run = await self._to_run(pulled)
                except AWAY as exc:  # Postgres or NATS away: wait for it, never exit
                    link = self._links.of_error(exc)
                    link.failed(exc, "pulling lines")
                    await _hand_back(pulled, DEFAULT_WAIT_S)
                    await link.pause()
                    continue
                if cancel_requested():  # the pull swallowed a stop: start none of these
                    await _hand_back(to_run)
                    raise asyncio.CancelledError
                for delivery in to_run:
                    self._start(delivery, ended)
                self._metrics.in_flight.set(len(self._running))
                if busy and not pulled:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(BUSY_PULL_S):  # not wait_for (3.11)
                            await ended.wait()
        finally:
            for task in list(self._running):
                task.cancel()
            if self._running:  # each hands its line back; none may hold the stop up for long
                await asyncio.wait(set(self._running), timeout=STOP_WAIT_S)

    def _start(self, delivery: Delivery, ended: asyncio.Event) -> None:
        tenant = delivery.item.tenant_id
        self._held[tenant] += 1
        task = asyncio.ensure_future(self._handle(delivery))
        self._running.add(task)

        def done(_: asyncio.Task[None]) -> None:
            self._running.discard(task)
            self._held[tenant] -= 1
            if self._held[tenant] <= 0:
                del self._held[tenant]
            ended.set()

        task.add_done_callback(done)

    def _room(self) -> Room:
        """What the next pull may take: per tenant, the cap less its lines here; none of a
        tenant whose quota gate is closed; none at all while the token is refused."""
        now = self._clock()
        if self._auth_gate > now:
            return Room(per_tenant=0)
        cap = self._settings.max_lines_in_flight_per_tenant
        room = {tenant: max(cap - held, 0) for tenant, held in self._held.items()}
        for tenant, until in list(self._quota_gates.items()):
            if until > now:
                room[tenant] = 0
            else:
                del self._quota_gates[tenant]
        return Room(cap, room)

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
            if batch.tenant_id == LEGACY_TENANT_ID:  # nobody's until a gateway adopts it
                self._metrics.line("deferred", len(group))
                for delivery in group:
                    await delivery.nak(UNADOPTED_WAIT_S)
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
        except AWAY as exc:  # logged once an outage by its link, not once a line
            self._links.of_error(exc).failed(exc, "running a line")
            with contextlib.suppress(Exception):
                await delivery.nak(DEFAULT_WAIT_S)
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
            line = None if batch is None else await self._inputs.line(batch, item.line)
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
        if isinstance(result, Later):  # its slot is free meanwhile; the queue keeps the line
            self._metrics.line("deferred")
            await delivery.nak(result.delay_s)
            return
        await self._committer.commit(batch.id, result, delivery)
        self._metrics.line("completed" if result.ok else "failed")

    async def _answer(
        self, batch: Batch, line: int, custom_id: str, body: bytes, delivery: Delivery
    ) -> LineResult | Later | None:
        """The line's result; ``Later`` if its tenant's quota says wait; None if its batch
        ended while it waited to run again."""
        failures = shed = 0
        while True:
            waited = await self._leased(delivery, self._wait_auth())
            closed_for_s = self._quota_gates.get(batch.tenant_id, 0.0) - self._clock()
            if closed_for_s > 0:
                return Later(min(closed_for_s, MAX_WAIT_S))
            if failures or shed or waited:
                now = await self._batch(batch.id)
                if now is None or now.status in FINAL or now.status == "cancelling":
                    return None
            await self._leased(delivery, self._window.acquire(batch.tenant_id))
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
            if status == QUOTA and answer.retry_after_s is not None:
                self._metrics.waited("quota")
                wait_s = min(MAX_WAIT_S, answer.retry_after_s or DEFAULT_WAIT_S)
                until = self._clock() + wait_s
                self._quota_gates[batch.tenant_id] = max(
                    self._quota_gates.get(batch.tenant_id, 0.0), until
                )
                return Later(wait_s)
            if (status, answer.error_type) == NOT_LIVE:
                # Its batch ended (a cancel, an expiry) before this executor heard: this
                # line alone is skipped, once this executor's own read says so too.
                now = await self._batch(batch.id, fresh=True)
                if now is None or now.status in FINAL or now.status == "cancelling":
                    return None
            if status in UNAUTHORIZED:
                wait_s = min(MAX_WAIT_S, answer.retry_after_s or DEFAULT_WAIT_S)
                self._auth_gate = max(self._auth_gate, self._clock() + wait_s)
                self._metrics.waited("unauthorized")
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
            else:  # the line's own fault, a 429 that can never pass among them
                data = output.answered(
                    batch.id, line, custom_id, status, answer.request_id, answer.body
                )
            return LineResult(line, False, data)

    async def _wait_auth(self) -> bool:
        """Wait out a closed auth gate; whether there was one."""
        waited = False
        while (wait_s := self._auth_gate - self._clock()) > 0:
            waited = True
            await asyncio.sleep(wait_s)
        return waited

    async def _leased(self, delivery: Delivery, work: Awaitable[T]) -> T:
        """``work``, touching the delivery's lease meanwhile so no one else takes it; a
        line asked to stop stops here, even if the ask came during a touch that swallowed
        it (``work`` runs in a task of its own: what it swallows is its own)."""
        task = asyncio.ensure_future(work)
        every_s = self._queue.lease_s / 3
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=every_s)
                raise_if_cancel_requested()
                if done:
                    return task.result()
                await delivery.touch()
        finally:
            task.cancel()

    async def _batch(self, batch_id: str, *, fresh: bool = False) -> Batch | None:
        """The batch as read at most ``BATCH_FRESH_S`` ago (``fresh``: read now)."""
        now = self._clock()
        seen = self._batches.get(batch_id)
        if seen is not None and now - seen[0] < BATCH_FRESH_S and not fresh:
            return seen[1]
        batch = await off_loop(self._store.batch_by_id, batch_id)
        self._batches[batch_id] = (now, batch)
        if len(self._batches) > 1024:
            self._batches = {k: v for k, v in self._batches.items() if now - v[0] < BATCH_FRESH_S}
        return batch


async def _hand_back(deliveries: list[Delivery], delay_s: float = 0.0) -> None:
    """Back to the queue, for another pull after ``delay_s`` (none when stopping: at once,
    for another executor); a nak that fails or takes too long (the queue away too) leaves
    the line to come back when its lease ends."""
    if not deliveries:
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(STOP_WAIT_S):
            await asyncio.gather(*(d.nak(delay_s) for d in deliveries), return_exceptions=True)


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

    def __init__(self, store: BatchStore, queue: WorkQueue, links: ExecutorLinks) -> None:
        self._store, self._queue, self._links = store, queue, links
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
                self._links.store.succeeded()
                await self._queue.ack_all([delivery for _, _, delivery, _ in taken])
                self._links.queue.succeeded()
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
