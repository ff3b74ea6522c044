"""Redis while it answers; this gateway's own buckets of failed key checks while it does not.

``FallbackFailureStore`` delegates to the shared store (``RedisFailureStore``). When that
raises ``FailureStoreUnavailable`` the gateway counts failures in its local store, logs one
warning on entering that mode and one info line on leaving it, and reports each change to
``on_mode_change`` (a metric). While local, at most one call per ``probe_interval_s`` tries
Redis first; the first one answered switches back.

It fails open, as the quota store does, but not to nothing: while local, each gateway
limits alone, so a guesser spread over N gateways gets up to N times the failures of one
address (or one prefix) that Redis would allow, and what the local buckets counted is
forgotten when Redis returns. The alternative, refusing every key check while Redis is
away, would turn an outage of Redis into an outage of every tenant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal

from headway.gateway.auth.store import (
    Failed,
    FailureStore,
    FailureStoreUnavailable,
    LocalFailureStore,
    Subject,
)

log = logging.getLogger(__name__)

Mode = Literal["redis", "local"]


class FallbackFailureStore:
    """The shared store while it answers; ``local`` while it does not."""

    def __init__(
        self,
        shared: FailureStore,
        local: LocalFailureStore,
        *,
        probe_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_mode_change: Callable[[str], None] | None = None,
    ) -> None:
        self._shared = shared
        self._local = local
        self._probe_interval_s = probe_interval_s
        self._clock = clock
        self._on_mode_change = on_mode_change
        self._mode: Mode = "redis"
        self._next_probe_s = 0.0

    @property
    def mode(self) -> Mode:
        return self._mode

    async def locked_for(self, subjects: Sequence[Subject]) -> list[float]:
        if not self._try_shared():
            return await self._local.locked_for(subjects)
        try:
            waits = await self._shared.locked_for(subjects)
        except FailureStoreUnavailable as exc:
            self._enter_local(exc)
            return await self._local.locked_for(subjects)
        self._enter_redis()
        return waits

    async def fail(self, subjects: Sequence[Subject]) -> list[Failed]:
        if not self._try_shared():
            return await self._local.fail(subjects)
        try:
            outcomes = await self._shared.fail(subjects)
        except FailureStoreUnavailable as exc:
            self._enter_local(exc)
            return await self._local.fail(subjects)
        self._enter_redis()
        return outcomes

    async def close(self) -> None:
        try:
            await self._shared.close()
        finally:
            await self._local.close()

    def _try_shared(self) -> bool:
        """Redis mode, or a probe is due (moved on first, so that concurrent checks do not
        all probe a dead server)."""
        if self._mode == "local" and self._clock() < self._next_probe_s:
            return False
        self._next_probe_s = self._clock() + self._probe_interval_s
        return True

    def _enter_local(self, exc: FailureStoreUnavailable) -> None:
        self._next_probe_s = self._clock() + self._probe_interval_s
        if self._mode == "local":
            return
        self._mode = "local"
        log.warning(
            "failed-auth store unavailable (%s); counting failed key checks on this gateway "
            "alone until it answers",
            exc,
        )
        if self._on_mode_change is not None:
            self._on_mode_change("local")

    def _enter_redis(self) -> None:
        if self._mode == "redis":
            return
        self._mode = "redis"
        log.info("failed-auth store is back; counting failed key checks in Redis again")
        if self._on_mode_change is not None:
            self._on_mode_change("redis")
