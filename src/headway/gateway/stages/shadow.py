"""Shadow traffic: a copy of the request to a candidate version, never awaited.

``Shadows.start`` is called beside the primary's dispatch when resolve chose a shadow
version for the request; the copy leaves once the primary has answered (so it never
competes with its own primary for a worker) and only if the candidate's pool has spare
room then (``AdmissionController.try_spare``: none when the pool is at capacity). It
is planned like the request, at ``SHADOW`` priority (below the batch tier; a worker
takes it only while its queues are empty and refuses it otherwise, counted as skipped
too), sent once per chunk (no retry, no hedge, nothing fed to the pool's latency or
ejection records), never charged to the tenant's quota and never metered; the
client's answer never waits for it. Its answer is compared with the primary's
(embeddings: cosine per text; rerank: rank correlation and top-1 agreement) and the
result goes to the ``ShadowObserver`` (metrics, and the counts a rollout is judged
on). The copy's rows also go to the quality monitor under the candidate's version,
marked as shadow traffic (``stages/quality.py``): the candidate's reference is taken
when it first runs as a shadow, and its drift is tracked before it serves anyone. A
primary that fails leaves nothing to compare with: no copy is made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from headway import wire
from headway.errors import Overloaded
from headway.gateway.context import RequestContext
from headway.gateway.stages.dispatch import gather_or_cancel, send_once
from headway.gateway.stages.merge import Merged, merge
from headway.gateway.stages.plan import Splittable, plan
from headway.gateway.stages.quality import QualitySampler, watch_quality
from headway.gateway.stages.resolve import ShadowTarget, Target
from headway.rollouts.compare import embedding_agreement, rerank_agreement
from headway.rollouts.observer import ShadowObserver

log = logging.getLogger(__name__)


class Shadows:
    """Owns the copies in flight (so none is garbage-collected mid-way, and ``stop``
    cancels them)."""

    def __init__(
        self,
        observer: ShadowObserver,
        quality: QualitySampler,
        chunk_texts: int,
        clock: Callable[[], float],
    ) -> None:
        self._observer = observer
        self._quality = quality
        self._chunk_texts = chunk_texts
        self._clock = clock
        self._running: set[asyncio.Task[None]] = set()

    def start(
        self, work: Splittable, ctx: RequestContext, target: Target
    ) -> asyncio.Future[Merged] | None:
        """If ``target`` has a shadow version: the future the primary's merged answer goes
        to (set it, or cancel it when the primary fails); the copy leaves once it is set."""
        shadow = target.shadow
        if shadow is None:
            return None
        loop = asyncio.get_running_loop()
        primary: asyncio.Future[Merged] = loop.create_future()
        task = loop.create_task(self._copy(work, ctx, target.record.version, shadow, primary))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return primary

    async def _copy(
        self,
        work: Splittable,
        ctx: RequestContext,
        primary_version: str,
        shadow: ShadowTarget,
        primary: asyncio.Future[Merged],
    ) -> None:
        try:
            answer = await primary
        except asyncio.CancelledError:
            return  # the primary failed: nothing to compare with, and no copy is made
        candidate = shadow.record.version
        if not shadow.pool.admission.try_spare(work.texts):
            self._observer.shadow_skipped(primary_version, candidate)
            return
        chunks = plan(work, ctx, candidate, self._chunk_texts, at=wire.Priority.SHADOW)
        started = self._clock()
        try:
            results = await gather_or_cancel(
                [send_once(chunk, shadow.pool, ctx.deadline) for chunk in chunks]
            )
        except Overloaded:  # a worker with work queued: no spare capacity there either
            self._observer.shadow_skipped(primary_version, candidate)
            return
        except Exception:
            self._observer.shadow_failed(primary_version, candidate, self._clock() - started)
            return
        finally:
            shadow.pool.admission.release_spare(work.texts)
        latency_s = self._clock() - started
        copy = merge(results)
        watch_quality(self._quality, candidate, copy, shadow=True)
        if copy.values.ndim == 2:
            agreement = embedding_agreement(answer.values, copy.values)
        else:
            agreement = rerank_agreement(answer.values, copy.values)
        self._observer.shadow_compared(primary_version, candidate, latency_s, agreement)

    async def stop(self) -> None:
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
