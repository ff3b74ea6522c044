"""An open-loop run: every request leaves at its intended time, whatever came back before.

A run sends a ``Plan`` (``plan.py``): a synthetic workload on a schedule and a
replayed trace are the same thing to it. All request bytes are built, and a few
connections opened, before the clock starts. The scheduler then sleeps until the
next intended time (at least ``TICK_S``) and fires every request that is due, each
stamped with the moment it actually left; it yields to the event loop after
``BURST`` requests so that answers are read even when it is behind. Each request's
deadline is its intended time plus the client timeout, so the run ends by itself at
the schedule's end plus that timeout (or sooner, once every request is answered).

The cyclic garbage collector is paused while the clock runs (and what was
built before is frozen out of its sight): a full collection over a run's
worth of live requests takes tens of milliseconds, which would show up as lag
and as latency. A request leaves no reference cycle behind, so nothing piles
up meanwhile; the collector is restored when the run ends.

Nothing here adapts to the server: a slow answer never delays the next send,
and a request sent late is recorded with its lag instead of being quietly
re-timed, so the report says when the generator could not keep its schedule.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from headway.transport.connection import Failure, Response, Result
from headway_tools.loadgen.client import (
    ConnectionPool,
    Target,
    encode_request,
    parse_base_url,
    request_head,
)
from headway_tools.loadgen.plan import Plan, plan_schedule
from headway_tools.loadgen.recorder import (
    ClientStats,
    Records,
    Report,
    error_reason,
    outcomes,
    summarize,
)
from headway_tools.loadgen.schedule import Schedule
from headway_tools.loadgen.workload import Workload

LEAD_S = 0.05  # from the end of the preparations to the first intended time
BURST = 64  # most requests fired without yielding to the event loop
# uvloop's timers count whole milliseconds and return at once from a shorter
# sleep, which would make the scheduler spin (and steal a core from the server
# under test); sleeping at least this long costs each request < ~1.2 ms of lag.
TICK_S = 0.001
WARM_CONNECTIONS = 8  # opened before the clock starts
_GRACE_S = 1.0  # past the last deadline: a bug, not a slow server

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class LoadResult:
    records: Records
    report: Report


def _encode(plan: Plan, target: Target) -> list[bytes]:
    """Each request's bytes; requests that share a sender, path and deadline share a head."""
    heads: dict[tuple[str, str, int], bytes] = {}
    encoded = []
    for request in plan.requests:
        which = (request.key, request.path, request.timeout_ms)
        head = heads.get(which)
        if head is None:
            head = heads[which] = request_head("POST", target, request.path, request.headers())
        encoded.append(encode_request(head, request.body))
    return encoded


class _Tally:
    """What happened to each request, filled in by the pool's callbacks."""

    def __init__(self, count: int, clock: Clock) -> None:
        self.clock = clock
        self.sent = [0.0] * count
        self.answered = [0.0] * count
        self.status = [0] * count
        self.failures: dict[int, Failure] = {}
        self.unanswered = count
        self.all_answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not count:
            self.all_answered.set_result(None)

    def on_done(self, i: int, result: Result) -> None:
        self.answered[i] = self.clock()
        if isinstance(result, Response):
            self.status[i] = result.status
            if result.status not in _NOT_ERRORS:
                self.failures[i] = Failure("error", error_reason(result))
        else:
            self.failures[i] = result
        self.unanswered -= 1
        if not self.unanswered:
            self.all_answered.set_result(None)


_NOT_ERRORS = frozenset((200, 429, 503, 504))


async def _fire(
    pool: ConnectionPool, requests: Sequence[bytes], due: Sequence[float], tally: _Tally
) -> None:
    """Submit request i at time ``due[i]`` (or as soon after as the loop allows)."""
    clock, submit, sent, on_done = tally.clock, pool.submit, tally.sent, tally.on_done
    count = len(requests)
    i = 0
    while i < count:
        now = clock()
        burst = 0
        while i < count and burst < BURST and due[i] <= now:
            sent[i] = now
            submit(requests[i], on_done, i, since=due[i])
            i += 1
            burst += 1
            now = clock()
        if burst == BURST:
            await asyncio.sleep(0)
        elif i < count:
            await asyncio.sleep(max(TICK_S, due[i] - now))


async def run_load(
    base_url: str,
    workload: Workload,
    schedule: Schedule,
    *,
    client_timeout_s: float,
    max_connections: int | None = None,
) -> LoadResult:
    """Send ``workload`` to ``base_url`` on ``schedule`` and record every request."""
    return await run_plan(
        base_url,
        plan_schedule(workload, schedule),
        client_timeout_s=client_timeout_s,
        max_connections=max_connections,
    )


async def run_plan(
    base_url: str,
    plan: Plan,
    *,
    client_timeout_s: float,
    max_connections: int | None = None,
) -> LoadResult:
    """Send ``plan``'s requests to ``base_url``, each at its offset, and record every one."""
    target = parse_base_url(base_url)
    offsets = np.array([r.offset_s for r in plan.requests], dtype=np.float64)
    requests = _encode(plan, target)
    pool = ConnectionPool(
        target.host, target.port, timeout_s=client_timeout_s, max_connections=max_connections
    )
    clock = time.perf_counter
    tally = _Tally(len(offsets), clock)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        await pool.warm(WARM_CONNECTIONS)
        cpu_started = time.process_time()
        start = clock() + LEAD_S
        due_at = start + offsets
        await _fire(pool, requests, due_at.tolist(), tally)
        await asyncio.sleep(max(0.0, start + plan.duration_s - clock()))
        last_deadline = float(due_at[-1]) + client_timeout_s if len(due_at) else start
        await asyncio.wait([tally.all_answered], timeout=last_deadline - clock() + _GRACE_S)
    finally:
        await pool.close()  # fails whatever is still open: every request gets a record
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
    client = ClientStats(
        target=base_url,
        arrivals=plan.arrivals,
        wall_s=clock() - start,
        cpu_s=time.process_time() - cpu_started,
        requests=len(offsets),
        connections_opened=pool.opened,
        peak_connections=pool.peak_connections,
        connect_failures=pool.connect_failures,
        waited_for_connection=pool.waited_at_limit,
    )
    records = _records(plan, offsets, due_at, tally)
    return LoadResult(records, summarize(records, plan.duration_s, client))


def _records(
    plan: Plan, offsets: NDArray[np.float64], due_at: NDArray[np.float64], tally: _Tally
) -> Records:
    status = np.asarray(tally.status, dtype=np.int32)
    timed_out = np.zeros(len(offsets), dtype=bool)
    errors: dict[int, str] = {}
    for index, failure in tally.failures.items():
        if failure.reason == "timeout":
            timed_out[index] = True
        else:
            errors[index] = failure.detail
    return Records(
        class_names=plan.class_names,
        class_index=np.array([r.class_index for r in plan.requests], dtype=np.int32),
        intended_s=offsets,
        lag_s=np.asarray(tally.sent, dtype=np.float64) - due_at,
        latency_s=np.asarray(tally.answered, dtype=np.float64) - due_at,
        status=status,
        outcome=outcomes(status, timed_out),
        texts=np.array([r.texts for r in plan.requests], dtype=np.int32),
        deadline_s=np.array([r.deadline_s for r in plan.requests], dtype=np.float64),
        errors=errors,
    )


def run_load_sync(
    base_url: str,
    workload: Workload,
    schedule: Schedule,
    *,
    client_timeout_s: float,
    max_connections: int | None = None,
) -> LoadResult:
    """``run_load`` on a fresh event loop (uvloop's when it is installed)."""
    return run_plan_sync(
        base_url,
        plan_schedule(workload, schedule),
        client_timeout_s=client_timeout_s,
        max_connections=max_connections,
    )


def run_plan_sync(
    base_url: str,
    plan: Plan,
    *,
    client_timeout_s: float,
    max_connections: int | None = None,
) -> LoadResult:
    """``run_plan`` on a fresh event loop (uvloop's when it is installed)."""
    main = run_plan(
        base_url, plan, client_timeout_s=client_timeout_s, max_connections=max_connections
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but optional here
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
