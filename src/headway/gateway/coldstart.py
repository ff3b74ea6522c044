"""Holding requests for a cold pool until a replica is ready, never past their deadline.

A request for a *cold* pool (``ReplicaPool.cold``: scaled to zero, or still starting) waits for
a ready replica instead of failing, until its deadline minus ``reserve_s`` (what its work needs
once a replica is up), then goes on as any other; one still waiting then is refused
(``still_cold``: 503 ``no_ready_replicas``) before its deadline, never after it. At most
``max_held_texts`` texts wait per pool; a request beyond them is refused at once (``held_full``:
503 ``overloaded``), except that an empty hold always takes one, however large, as an idle
pool's admission does.

While any request waits, ``poll_step`` polls the pool's replicas every ``cold_start_poll_s``
instead of every ``health_interval_s``, and its discovery every ``DISCOVER_HELD_S`` (a headless
service names only ready pods: the first one KEDA starts is a new address).

A *failing* pool (a replica lost or ejected) holds nothing: its requests fail at once, so that
clients retry elsewhere. Either way the request is demand (``wanted``) for the wake hook
(``gateway/wake.py``). A client that disconnects cancels its request's task, and the
``finally`` gives its place back at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from headway.gateway.context import Clock, Deadline
from headway.gateway.pool import ReplicaPool
from headway.gateway.pools import Pools

RETRY_AFTER_S = 1.0
"""What a refused request is told: a replica's start is seconds, not minutes."""
DISCOVER_HELD_S = 0.5

Rediscover = Callable[[], Awaitable[None]]

HoldReason = Literal["held_full", "still_cold"]


@dataclass(frozen=True, slots=True)
class HoldPolicy:
    enabled: bool = True
    max_held_texts: int = 1024
    reserve_s: float = 0.2


@dataclass(frozen=True, slots=True)
class HoldRefusal:
    reason: HoldReason
    retry_after_s: float = RETRY_AFTER_S


class ColdStart:
    """One pool's held requests; all calls on the gateway's event loop, its one owner."""

    def __init__(
        self,
        pool: ReplicaPool,
        policy: HoldPolicy,
        clock: Clock = time.monotonic,
        observe_wait: Callable[[float], None] | None = None,
        rediscover: Rediscover | None = None,
    ) -> None:
        """``observe_wait(seconds)``: how long each held request waited, however it ended;
        ``rediscover``: ask the pool's discovery where its replicas are now."""
        self.pool = pool
        self.policy = policy
        self.clock = clock
        self.held_requests = 0
        self.held_texts = 0
        self.wanted = False
        """A request found the pool without a ready replica since the wake hook was told."""
        self._observe_wait = observe_wait
        self._rediscover = rediscover
        self._discovered_at = -math.inf

    @property
    def holding(self) -> bool:
        """The pool is cold and its requests wait for it (holding is on)."""
        return self.policy.enabled and self.pool.cold

    async def hold(self, texts: int, deadline: Deadline) -> HoldRefusal | None:
        """None once the pool has a ready replica, or at once when it is failing or holding
        is off (what follows fails the request); a refusal otherwise."""
        pool = self.pool
        if pool.ready_count:
            return None
        self.wanted = True
        if not self.holding:
            return None
        if self.held_requests and self.held_texts + texts > self.policy.max_held_texts:
            return HoldRefusal("held_full")
        budget_s = deadline.remaining_s() - self.policy.reserve_s
        if budget_s <= 0:
            return HoldRefusal("still_cold")
        self.held_requests += 1
        self.held_texts += texts
        started = self.clock()
        try:
            async with asyncio.timeout(budget_s):
                await pool.wait_ready()
        except TimeoutError:
            return HoldRefusal("still_cold")
        finally:
            self.held_requests -= 1
            self.held_texts -= texts
            if self._observe_wait is not None:
                self._observe_wait(self.clock() - started)
        return None

    async def poll_step(self) -> None:
        """The fast readiness poll (and the quicker discovery): only while requests are
        held."""
        if not self.held_requests:
            return
        now = self.clock()
        if self._rediscover is not None and now - self._discovered_at >= DISCOVER_HELD_S:
            self._discovered_at = now
            await self._rediscover()  # polls each replica it adds
        await self.pool.poll_once()


class ColdStarts:
    """Every pool's ``ColdStart``."""

    def __init__(
        self,
        pools: Pools,
        policy: HoldPolicy,
        clock: Clock = time.monotonic,
        observe_wait: Callable[[str, float], None] | None = None,
        rediscover: Callable[[ReplicaPool], Rediscover] | None = None,
    ) -> None:
        """``observe_wait(pool, seconds)``: each held request's wait (a histogram);
        ``rediscover(pool)``: the step that asks the pool's discovery again."""
        self._pools = pools
        self._by_pool = {
            pool.name: ColdStart(
                pool,
                policy,
                clock,
                _for_pool(observe_wait, pool.name),
                None if rediscover is None else rediscover(pool),
            )
            for pool in pools
        }

    def __iter__(self) -> Iterator[ColdStart]:
        return iter(self._by_pool.values())

    def __getitem__(self, pool: str) -> ColdStart:
        return self._by_pool[pool]

    def of(self, pool: ReplicaPool | None) -> ColdStart | None:
        """``pool``'s (``Pools.for_models``: resolving the model needs a ready replica, so
        the wait comes before it and goes by the model's kind)."""
        return None if pool is None else self._by_pool[pool.name]


def _for_pool(
    observe: Callable[[str, float], None] | None, pool: str
) -> Callable[[float], None] | None:
    if observe is None:
        return None
    return lambda seconds: observe(pool, seconds)
