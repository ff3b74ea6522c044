"""Telling whoever starts replicas that a cold pool is wanted: the wake hook.

``gateway.wake_url`` names it; ``headway up`` sets it to its supervisor, which starts
the pool's workers. ``Waker.step`` runs as a background loop (every
``cold_start_poll_s``, off the request path): for each pool that a request found
without a ready replica, or that holds requests, it POSTs ``{"pool": NAME}`` at most
once a second. A failure is logged once (and again only after the hook has answered
in between), counted, and otherwise ignored: held requests wait on the pool's
readiness whatever the hook says. In Kubernetes no hook is set; the same demand
reaches KEDA through ``headway_pool_waiting_requests``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Protocol
from urllib.parse import urlsplit

import msgspec

from headway.gateway.coldstart import ColdStart
from headway.gateway.context import Clock
from headway.transport.base import Transport, TransportError, UpstreamRequest

log = logging.getLogger(__name__)

WAKE_INTERVAL_S = 1.0
WAKE_TIMEOUT_S = 1.0


class WakeFailed(Exception):
    """The wake hook could not be told (no answer, or not a 2xx)."""


class WakeHook(Protocol):
    async def wake(self, pool: str) -> None: ...


class HttpWakeHook:
    """``POST {"pool": NAME}`` to ``url`` through the gateway's transport."""

    def __init__(self, url: str, transport: Transport, timeout_s: float = WAKE_TIMEOUT_S) -> None:
        parts = urlsplit(url)
        self._base = f"{parts.scheme}://{parts.netloc}"
        self._path = parts.path or "/"
        self._transport = transport
        self._timeout_s = timeout_s

    async def wake(self, pool: str) -> None:
        body = msgspec.json.encode({"pool": pool})
        request = UpstreamRequest(
            "POST", self._base, self._path, self._timeout_s, body, "application/json"
        )
        try:
            reply = await self._transport.send(request)
        except TransportError as exc:
            raise WakeFailed(f"no answer from {self._base}{self._path}: {exc}") from exc
        if not 200 <= reply.status < 300:
            raise WakeFailed(f"{self._base}{self._path} answered {reply.status}")


class RecordingWakeHook:
    """The fake: remembers every pool it was told of; fails while ``failing``."""

    def __init__(self) -> None:
        self.woken: list[str] = []
        self.failing = False

    async def wake(self, pool: str) -> None:
        if self.failing:
            raise WakeFailed("the fake hook is failing")
        self.woken.append(pool)


class Waker:
    def __init__(
        self,
        hook: WakeHook,
        cold_starts: Iterable[ColdStart],
        clock: Clock = time.monotonic,
        on_wake: Callable[[str, bool], None] | None = None,
        interval_s: float = WAKE_INTERVAL_S,
    ) -> None:
        """``on_wake(pool, ok)``: each call of the hook and whether it answered."""
        self._hook = hook
        self._cold_starts = list(cold_starts)
        self._clock = clock
        self._on_wake = on_wake
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._failing: set[str] = set()

    async def step(self) -> None:
        for cold in self._cold_starts:
            name = cold.pool.name
            now = self._clock()
            if not (cold.wanted or cold.held_requests):
                continue
            if now - self._last.get(name, -math.inf) < self._interval_s:
                continue
            cold.wanted = False
            self._last[name] = now
            ok = await self._tell(name)
            if self._on_wake is not None:
                self._on_wake(name, ok)

    async def _tell(self, pool: str) -> bool:
        try:
            await self._hook.wake(pool)
        except WakeFailed as exc:
            if pool not in self._failing:
                self._failing.add(pool)
                log.warning("wake hook for pool %s failed (%s); requests wait anyway", pool, exc)
            return False
        if pool in self._failing:
            self._failing.discard(pool)
            log.info("wake hook for pool %s answers again", pool)
        return True
