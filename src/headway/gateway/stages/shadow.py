"""Shadow traffic: a copy of the request to a candidate version, never awaited.

``Shadows.start`` runs beside the primary's dispatch when resolve chose a shadow
version for the request. The copy is planned like the request, at ``SHADOW``
priority (below the batch tier: a worker runs it only when its queue is nearly
empty, and refuses it otherwise), and only if the candidate's pool has spare room
(``AdmissionController.try_spare``: none when the pool is at capacity). It is sent
once per chunk (no retry, no hedge, nothing fed to the pool's latency or ejection
records), it is never charged to the tenant's quota and never metered, and the
client's answer never waits for it. When both answers are in, the copy's is compared
with the primary's (embeddings: cosine per text; rerank: rank correlation and top-1
agreement) and the result goes to the ``ShadowObserver`` (metrics, and the counts a
rollout is judged on). A primary that fails leaves nothing to compare with: the copy
is counted as sent, not compared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from headway import wire
from headway.gateway.context import RequestContext
from headway.gateway.stages.dispatch import gather_or_cancel, send_once
from headway.gateway.stages.merge import Merged, merge
from headway.gateway.stages.plan import Chunk, Splittable, plan
from headway.gateway.stages.resolve import ShadowTarget, Target
from headway.rollouts.compare import Agreement, embedding_agreement, rerank_agreement

log = logging.getLogger(__name__)


class ShadowObserver(Protocol):
    def shadow_skipped(self, primary: str, candidate: str) -> None:
        """No spare room: the copy was not sent."""

    def shadow_failed(self, primary: str, candidate: str, latency_s: float) -> None: ...

    def shadow_compared(
        self, primary: str, candidate: str, latency_s: float, agreement: Agreement | None
    ) -> None:
        """The copy answered; ``agreement`` None when the primary failed."""


class Shadows:
    """Owns the copies in flight (so none is garbage-collected mid-way, and ``stop``
    cancels them)."""

    def __init__(
        self, observer: ShadowObserver, chunk_texts: int, clock: Callable[[], float]
    ) -> None:
        self._observer = observer
        self._chunk_texts = chunk_texts
        self._clock = clock
        self._running: set[asyncio.Task[None]] = set()

    def start(
        self, work: Splittable, ctx: RequestContext, target: Target
    ) -> asyncio.Future[Merged] | None:
        """Send the copy if ``target`` has one and there is room; the future returned is
        for the primary's merged answer (set it, or cancel it when the primary fails)."""
        shadow = target.shadow
        if shadow is None:
            return None
        primary_version, candidate = target.record.version, shadow.record.version
        if not shadow.pool.admission.try_spare(work.texts):
            self._observer.shadow_skipped(primary_version, candidate)
            return None
        primary: asyncio.Future[Merged] = asyncio.get_running_loop().create_future()
        chunks = plan(work, ctx, candidate, self._chunk_texts, at=wire.Priority.SHADOW)
        task = asyncio.get_running_loop().create_task(
            self._copy(chunks, shadow, ctx, work.texts, primary_version, primary)
        )
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return primary

    async def _copy(
        self,
        chunks: list[Chunk],
        shadow: ShadowTarget,
        ctx: RequestContext,
        texts: int,
        primary_version: str,
        primary: asyncio.Future[Merged],
    ) -> None:
        candidate = shadow.record.version
        started = self._clock()
        try:
            results = await gather_or_cancel(
                [send_once(chunk, shadow.pool, ctx.deadline) for chunk in chunks]
            )
        except Exception:
            self._observer.shadow_failed(primary_version, candidate, self._clock() - started)
            return
        finally:
            shadow.pool.admission.release_spare(texts)
        latency_s = self._clock() - started
        try:
            answer = await primary
        except asyncio.CancelledError:
            self._observer.shadow_compared(primary_version, candidate, latency_s, None)
            return
        copy = merge(results)
        if copy.values.ndim == 2:
            agreement = embedding_agreement(answer.values, copy.values)
        else:
            agreement = rerank_agreement(answer.values, copy.values)
        self._observer.shadow_compared(primary_version, candidate, latency_s, agreement)

    async def stop(self) -> None:
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
