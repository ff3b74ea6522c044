"""A minimal HTTP/1.1 keep-alive client that costs ~25 µs of CPU per request.

General clients spend far more CPU per request than a gateway's fast refusal
costs to serve (aiohttp ~200 µs, httpx 2–3 ms here), so a load generator built
on them measures itself. This one (most of whose cost is the kernel's send and
receive on loopback) sends pre-encoded request bytes over asyncio
``Protocol`` connections (``connection.py``), with no task and no coroutine per
request: ``submit`` hands bytes and a callback to a free connection, and the
connection calls back from ``data_received`` once the response is complete.

The pool grows on demand: a request that finds no idle connection waits in a
FIFO, and a new connection is opened for each waiting request beyond those
already being opened (at most ``MAX_CONNECTING`` at once, and up to
``max_connections`` in all, a lost connection making room for a new one as it
goes); whichever connection frees up first takes the oldest waiting request.
Idle connections are reused last-in first-out, which keeps the busy set small
and warm.

Every request has a deadline, ``since + timeout_s`` (``since`` defaults to
now; an open-loop run passes the intended send time). Deadlines are kept in
``SLOT_S`` slots: a request is appended to its slot's list, and one timer,
armed for the earliest slot, fails the requests of each slot that has passed
and are still open with ``timeout``, aborting their connections (a late answer
could otherwise be taken for the next request's). Answered requests are simply
skipped when their slot comes, so the work per slot is bounded by the requests
sent in ``SLOT_S``: there is no per-request timer to cancel and no pause to
clean up after a long timeout. A request whose connection cannot be opened or
breaks fails with ``error``. Every request therefore ends, exactly once, at
most ``SLOT_S`` after its deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from headway.transport.connection import Connection, Failure, OnDone, Pending, Response, Result
from headway_tools.loadgen.errors import InvalidSpec, RequestFailed

Clock = Callable[[], float]
# Connections being opened at once. Without a bound, a generator that falls
# behind opens one per late request, and the connection storm (hundreds of
# connects a millisecond, each costing both ends far more than a request)
# makes it fall further behind; 8 at a time still opens tens of thousands a
# second on a local network. A request that waits for one still counts the
# wait in its latency.
MAX_CONNECTING = 8
SLOT_S = 0.005  # deadlines are checked in slots this long: a timeout fires up to this late


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: ``host``/``port`` to connect to, ``authority`` for the Host header."""

    host: str
    port: int
    path_prefix: str

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_base_url(base_url: str) -> Target:
    parts = urlsplit(base_url)
    if parts.scheme != "http":
        raise InvalidSpec(f"the load generator speaks plain http://, not {base_url!r}")
    if not parts.hostname or parts.query or parts.fragment:
        raise InvalidSpec(f"expected http://host[:port][/prefix], not {base_url!r}")
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise InvalidSpec(f"bad port in {base_url!r}") from exc
    return Target(parts.hostname, port, parts.path.rstrip("/"))


def request_head(
    method: str, target: Target, path: str, headers: Sequence[tuple[str, str]]
) -> bytes:
    """A request's line and headers, without the blank line that ends the head."""
    lines = [f"{method} {target.path_prefix}{path} HTTP/1.1", f"Host: {target.authority}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def encode_request(head: bytes, body: bytes) -> bytes:
    """A complete request, ready to write as it is, from ``request_head`` and a body."""
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)


class ConnectionPool:
    """Keep-alive connections to one ``host:port``; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float,
        max_connections: int | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        if timeout_s <= 0:
            raise InvalidSpec(f"the client timeout must be positive, not {timeout_s}")
        if max_connections is not None and max_connections < 1:
            raise InvalidSpec(f"max_connections must be at least 1, not {max_connections}")
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.clock = clock
        self.opened = 0
        self.connect_failures = 0
        self.peak_connections = 0
        self.waited_at_limit = 0  # requests that found every one of max_connections busy
        self._open: set[Connection] = set()
        self._idle: list[Connection] = []
        self._waiting: deque[Pending] = deque()
        self._connecting = 0
        self._connect_tasks: set[asyncio.Task[None]] = set()
        self._slots: dict[int, list[Pending]] = {}  # deadline slot → requests due then
        self._slot_order: list[int] = []  # a heap of the keys of _slots
        self._timer: asyncio.TimerHandle | None = None
        self._timer_slot = 0
        self._all_closed: asyncio.Future[None] | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()

    def submit(
        self, request: bytes, on_done: OnDone, token: int, *, since: float | None = None
    ) -> None:
        """Send ``request``; ``on_done(token, result)`` is called exactly once, by the deadline."""
        deadline = (self.clock() if since is None else since) + self.timeout_s
        pending = Pending(request, on_done, token)
        if self._closed:
            pending.finish(Failure("error", "pool closed"))
            return
        slot = math.ceil(deadline / SLOT_S)
        due = self._slots.get(slot)
        if due is None:
            self._slots[slot] = [pending]
            heapq.heappush(self._slot_order, slot)
            if self._timer is None or slot < self._timer_slot:
                self._arm(slot)
        else:
            due.append(pending)
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.usable:
                connection.send(pending)
                return
        self._waiting.append(pending)
        limit = self.max_connections
        if limit is not None and len(self._open) + self._connecting >= limit:
            self.waited_at_limit += 1
        else:
            self._grow()

    async def warm(self, count: int) -> None:
        """Open ``count`` connections now (fewer if ``max_connections`` says so) and keep
        them idle, so the first requests do not pay for connecting; failures are counted
        in ``connect_failures`` and otherwise ignored."""
        if self.max_connections is not None:
            count = min(count, self.max_connections - len(self._open) - self._connecting)
        tasks = []
        for _ in range(max(0, count)):
            self._connecting += 1
            tasks.append(self._loop.create_task(self._connect()))
        self._connect_tasks.update(tasks)
        for task in tasks:
            task.add_done_callback(self._connect_tasks.discard)
        await asyncio.gather(*tasks)

    async def request(self, request: bytes) -> Response:
        """One request, awaited; no response raises ``RequestFailed``."""
        future: asyncio.Future[Result] = self._loop.create_future()

        def done(token: int, result: Result) -> None:
            if not future.done():
                future.set_result(result)

        self.submit(request, done, 0)
        result = await future
        if isinstance(result, Failure):
            raise RequestFailed(result.reason, result.detail)
        return result

    @property
    def connections(self) -> int:
        return len(self._open)

    async def close(self) -> None:
        """Fail what is still waiting or in flight, close every connection, and wait for it."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._connect_tasks):
            task.cancel()
        if self._connect_tasks:
            await asyncio.gather(*self._connect_tasks, return_exceptions=True)
        while self._waiting:
            self._waiting.popleft().finish(Failure("error", "pool closed"))
        for connection in list(self._open):
            pending, connection.pending = connection.pending, None
            if pending is not None:
                pending.finish(Failure("error", "pool closed"))
            connection.abort()
        if self._open:
            self._all_closed = self._loop.create_future()
            await self._all_closed

    # -- the Owner protocol, for connections -----------------------------------------

    def release(self, connection: Connection) -> None:
        waiting = self._waiting
        while waiting:
            pending = waiting.popleft()
            if not pending.done:
                connection.send(pending)
                return
        self._idle.append(connection)

    def lost(self, connection: Connection) -> None:
        self._open.discard(connection)
        if not self._closed:
            self._grow()  # a request may be waiting because this one held the last place
        elif not self._open and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)

    def _grow(self) -> None:
        limit = self.max_connections
        while (
            len(self._waiting) > self._connecting
            and self._connecting < MAX_CONNECTING
            and (limit is None or len(self._open) + self._connecting < limit)
        ):
            self._connecting += 1
            task = self._loop.create_task(self._connect())
            self._connect_tasks.add(task)
            task.add_done_callback(self._connect_tasks.discard)

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                _, connection = await self._loop.create_connection(
                    lambda: Connection(self), self.host, self.port
                )
        except (OSError, TimeoutError) as exc:
            self._connecting -= 1
            self.connect_failures += 1
            # The oldest waiting request pays for the failure; the rest get a new try.
            while self._waiting:
                pending = self._waiting.popleft()
                if not pending.done:
                    pending.finish(Failure("error", f"connect: {exc!r}"))
                    break
            if not self._closed:
                self._grow()
            return
        self._connecting -= 1
        if self._closed or not connection.usable:
            connection.abort()
            if not self._closed:
                self._grow()
            return
        self.opened += 1
        self._open.add(connection)
        self.peak_connections = max(self.peak_connections, len(self._open))
        self.release(connection)
        self._grow()

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_slot = slot
        self._timer = self._loop.call_later(max(0.0, slot * SLOT_S - self.clock()), self._expire)

    def _expire(self) -> None:
        self._timer = None
        now_slot = math.floor(self.clock() / SLOT_S)
        order = self._slot_order
        while order and order[0] <= now_slot:
            for pending in self._slots.pop(heapq.heappop(order)):
                if not pending.done:
                    connection = pending.connection
                    if connection is not None:
                        connection.pending = None
                        connection.abort()
                    pending.finish(Failure("timeout", f"no response in {self.timeout_s:g}s"))
        if order:
            self._arm(order[0])
