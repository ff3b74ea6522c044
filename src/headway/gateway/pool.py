"""A model pool's replicas as the gateway sees them, and where the next chunk goes.

A replica takes work, for the versions it named, while its last ``/readyz`` (``poll_once``)
said it is ready and it is not ejected; the next chunk goes to the shorter expected wait (texts
outstanding from this gateway x recent latency), by power of two choices. Each pool has its own
admission controller (sized by its ready replicas and by what the whole pool completes), retry
budget, and recent chunk latency (the hedging threshold).

A pool with no ready replica is **cold** or **failing**: requests wait for a cold one
(``gateway/coldstart.py``) and fail at once on a failing one, so that clients retry elsewhere.
Cold: no replica is lost or ejected (scaled to zero, starting, or drained: ``/readyz`` said 503
before the replica went silent). Failing: a ready replica stopped answering without saying so
first (a crash, a refused connection: it is *lost*, and ejected until it answers ``/readyz``
again, 200 or 503), or was ejected after repeated failed calls (``routing/ejection.py``). The
poll, or discovery adding a ready replica, wakes every ``wait_ready`` once a replica is ready.

An operator sees each replica as *ready*, *unready* (by its own word, or not yet answered) or
*ejected* (``state``); every ejection is counted and logged, with its ``ejection_reason``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from headway import wire
from headway.gateway.admission.controller import AdmissionConfig, AdmissionController
from headway.gateway.routing.ejection import EjectionPolicy, Health, after_failure, after_success
from headway.gateway.routing.hedging import LatencyQuantile
from headway.gateway.routing.p2c import choose
from headway.gateway.routing.retry_budget import RetryBudget
from headway.transport.base import Reply, Transport, TransportError, UpstreamRequest

log = logging.getLogger(__name__)


class ServedVersion(msgspec.Struct):
    version: str
    kind: str = ""
    dimensions: int = 0
    loaded: bool = True
    """False: served on demand, loaded when a chunk first asks for it (workers before
    on-demand loading held every version they served)."""


class ReadyState(msgspec.Struct):
    ready: bool
    model_version: str = ""
    kind: str = ""
    dimensions: int = 0
    versions: list[ServedVersion] | None = None

    def served(self) -> frozenset[str]:
        if self.versions is None:
            return frozenset({self.model_version}) if self.model_version else frozenset()
        return frozenset(served.version for served in self.versions)

    def loaded(self) -> frozenset[str]:
        if self.versions is None:
            return self.served()
        return frozenset(served.version for served in self.versions if served.loaded)


_ready_decoder = msgspec.json.Decoder(ReadyState)
DEFAULT_EJECTION = EjectionPolicy()


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """What a pool does beyond the first attempt of a chunk."""

    retries: bool = True
    retry_ratio: float = 0.2
    hedging: bool = False
    hedge_quantile: float = 0.95
    ejection: EjectionPolicy = DEFAULT_EJECTION


@dataclass(slots=True)
class RoutingCounts:
    """Chunks sent, and the extra attempts they cost: the price of retries and hedges."""

    chunks: int = 0
    retries: int = 0
    hedges: int = 0
    hedges_won: int = 0
    ejections: int = 0


@dataclass(slots=True)
class Replica:
    url: str
    ready: bool = False
    model_version: str = ""
    """The version a chunk naming none gets there (its first)."""
    versions: frozenset[str] = frozenset()
    loaded: frozenset[str] = frozenset()
    """Of ``versions``, those loaded now (the rest load when first asked for)."""
    kind: str = ""
    dimensions: int = 0
    outstanding_texts: int = 0
    health: Health = field(default_factory=Health)
    latency_s: float = 0.0
    """Exponentially weighted latency of its recent successful calls; 0 before the first."""
    lost: bool = False
    """It was ready, then stopped answering without first saying it was not ready (a
    crash): ejected, and the pool failing, not cold, until it answers ``/readyz`` again."""
    losses: int = 0
    """Times it was lost."""
    completed_texts: int | None = None
    """Its completed-texts counter as its last answer to this gateway said; None before."""


class ReplicaPool:
    def __init__(
        self,
        name: str,
        urls: tuple[str, ...],
        transport: Transport,
        *,
        health_interval_s: float,
        admission: AdmissionConfig,
        clock: Callable[[], float] = time.monotonic,
        routing: RoutingPolicy = RoutingPolicy(),
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.transport = transport
        self.routing = routing
        self._rng = rng or random.Random()
        self.retry_budget = RetryBudget(clock, ratio=routing.retry_ratio)
        self.latency = LatencyQuantile(routing.hedge_quantile)
        self.counts = RoutingCounts()
        self.replicas = [Replica(url.rstrip("/")) for url in urls]
        self.ready_count = 0
        self.versions: frozenset[str] = frozenset()  # model versions ready replicas serve
        self.admission = AdmissionController(admission, lambda: self.ready_count, clock=clock)
        self.health_interval_s = health_interval_s
        self._warm = asyncio.Event()  # set while a replica is ready

    async def set_addresses(self, urls: list[str]) -> None:
        """Follow discovery: keep known replicas, add new ones (unready until polled), drop
        vanished ones (work already sent to them finishes on its own)."""
        known = {replica.url: replica for replica in self.replicas}
        wanted = [url.rstrip("/") for url in urls]
        if list(known) == wanted:
            return
        added = [url for url in wanted if url not in known]
        removed = [url for url in known if url not in wanted]
        self.replicas = [known.get(url) or Replica(url) for url in wanted]
        log.info("pool %s replicas: +%s -%s", self.name, added or "[]", removed or "[]")
        await asyncio.gather(*(self._poll(r) for r in self.replicas if r.url in added))
        self._recount()

    async def poll_once(self) -> None:
        await asyncio.gather(*(self._poll(replica) for replica in self.replicas))

    async def _poll(self, replica: Replica) -> None:
        request = UpstreamRequest("GET", replica.url, "/readyz", self.health_interval_s * 2)
        state, ready = ReadyState(ready=False), False
        try:
            reply = await self.transport.send(request)
        except TransportError:
            if replica.ready:  # gone without a word: crashed, not drained
                self._lose(replica, "stopped answering /readyz")
        else:
            replica.lost = False  # it answers (starting, draining or ready): not lost
            try:
                state = _ready_decoder.decode(reply.body)
                ready = state.ready and reply.status == 200
            except msgspec.DecodeError:
                state, ready = ReadyState(ready=False), False
        if ready != replica.ready:
            log.info("replica %s of pool %s: ready=%s", replica.url, self.name, ready)
        if ready:
            replica.model_version = state.model_version
            replica.versions = state.served()
            replica.loaded = state.loaded()
            replica.kind = state.kind
            replica.dimensions = state.dimensions
        self._set_ready(replica, ready)

    def mark_unreachable(self, replica: Replica) -> None:
        if replica.ready:
            self._lose(replica, "refused a connection")
        self._set_ready(replica, False)

    def _lose(self, replica: Replica, why: str) -> None:
        """A ready replica went away without a word: ejected until it answers again."""
        if not replica.lost:
            replica.losses += 1
            self.counts.ejections += 1
            log.warning(
                "replica %s of pool %s ejected: it %s while ready", replica.url, self.name, why
            )
        replica.lost = True

    def _set_ready(self, replica: Replica, ready: bool) -> None:
        replica.ready = ready
        self._recount()

    def _recount(self) -> None:
        self.ready_count = sum(r.ready for r in self.replicas)
        self.versions = frozenset().union(*(r.versions for r in self.replicas if r.ready))
        if self.ready_count:
            self._warm.set()
        else:
            self._warm.clear()

    @property
    def cold(self) -> bool:
        """No replica ready and none failing (see the module docstring)."""
        if self.ready_count:
            return False
        now = self.clock()
        return not any(r.lost or r.health.ejected(now) for r in self.replicas)

    async def wait_ready(self) -> None:
        """Returns once a replica is ready (at once if one is)."""
        await self._warm.wait()

    def pick(
        self,
        version: str,
        exclude: Replica | None = None,
        max_latency_s: float = math.inf,
        spread: Spread | None = None,
    ) -> Replica | None:
        """Power of two choices on expected wait among the replicas that may take work:
        ready, not ejected, and serving ``version`` (during a rollout two versions may be
        ready at once, on one replica or on several; a request goes only to the version it
        was admitted with); for a hedge, recently no slower than ``max_latency_s``; with
        ``spread``, not yet used by the request's other chunks while any unused one is left."""
        now = self.clock()
        candidates = [
            r
            for r in self.replicas
            if r.ready
            and version in r.versions
            and r is not exclude
            and not r.health.ejected(now)
            and r.latency_s <= max_latency_s
        ]
        if spread is not None:
            candidates = spread.unused(candidates)
        choice = choose(candidates, expected_wait(candidates), self._rng)
        if spread is not None and choice is not None:
            spread.used.add(choice.url)
        return choice

    def chunk_sent(self) -> None:
        """A chunk on its way: counted, and it earns the retry budget its share."""
        self.retry_budget.record_request()
        self.counts.chunks += 1

    def extra_attempt(self, kind: Literal["retry", "hedge"]) -> bool:
        """One more attempt for a chunk, if the retry budget has one (counted by kind)."""
        if not self.retry_budget.try_retry():
            return False
        if kind == "retry":
            self.counts.retries += 1
        else:
            self.counts.hedges += 1
        return True

    def hedge_won(self) -> None:
        self.counts.hedges_won += 1

    def take(self, replica: Replica, texts: int) -> None:
        """``texts`` sent to ``replica``: its outstanding work until ``release``."""
        replica.outstanding_texts += texts

    def release(self, replica: Replica, texts: int) -> None:
        replica.outstanding_texts -= texts

    def hedge_after_s(self) -> float | None:
        """How long a chunk waits before it is hedged; None: hedging off, or too few samples."""
        return self.latency.value_s() if self.routing.hedging else None

    def record(self, replica: Replica, *, ok: bool, latency_s: float = 0.0) -> None:
        """A call's outcome: feeds ejection (failures) and recent latency (replica and pool)."""
        if ok:
            replica.health = after_success(replica.health)
            if replica.latency_s == 0:  # its first answer: not a fifth of it
                replica.latency_s = latency_s
            else:
                replica.latency_s += 0.2 * (latency_s - replica.latency_s)
            self.latency.record(latency_s)
            return
        now = self.clock()
        ejected_now = sum(r.health.ejected(now) for r in self.replicas)
        was_ejected = replica.health.ejected(now)
        replica.health = after_failure(
            replica.health, now, self.routing.ejection, ejected_now, len(self.replicas)
        )
        if replica.health.ejected(now) and not was_ejected:
            self.counts.ejections += 1
            log.warning(
                "replica %s of pool %s ejected for %.1fs after repeated failures",
                replica.url,
                self.name,
                replica.health.ejected_until - now,
            )

    def observe_reply(self, replica: Replica, reply: Reply) -> None:
        """Feed admission with how far the replica's completed-texts counter moved since its
        last answer here (``wire.COMPLETED_HEADER``: every gateway's work). A counter that
        went back is a restarted worker: what it counts is all new."""
        counter = wire.completed_texts(reply.headers.get(wire.COMPLETED_HEADER))
        if counter is None:
            return
        last, replica.completed_texts = replica.completed_texts, counter
        if last is not None:
            self.admission.pool_completed(counter - last if counter >= last else counter)

    def state(self, replica: Replica) -> Literal["ready", "unready", "ejected"]:
        if replica.lost or replica.health.ejected(self.clock()):
            return "ejected"
        return "ready" if replica.ready else "unready"

    def ejection_reason(self, replica: Replica) -> str:
        """Why an ejected replica is out: "unreachable" (lost) or "failing" (its calls
        failed); "" for one not ejected."""
        if replica.lost:
            return "unreachable"
        return "failing" if replica.health.ejected(self.clock()) else ""


def expected_wait(candidates: list[Replica]) -> Callable[[Replica], float]:
    """A replica's load as the time its outstanding work should take: (texts + 1) x its
    recent latency, so a replica that answers slowly gets less; one with no latency
    known yet (just started) counts as the others' mean, not as free."""
    known = [r.latency_s for r in candidates if r.latency_s > 0]
    typical = sum(known) / len(known) if known else 1.0
    return lambda r: (r.outstanding_texts + 1) * (r.latency_s or typical)


class Spread:
    """The replicas one request's chunks went to: each next chunk prefers one not yet
    used, so 8 chunks on 4 replicas are 2 each, not 3 on one by chance."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def unused(self, candidates: list[Replica]) -> list[Replica]:
        fresh = [r for r in candidates if r.url not in self.used]
        if fresh:
            return fresh
        self.used.clear()  # every replica has one: start a new round
        return candidates
