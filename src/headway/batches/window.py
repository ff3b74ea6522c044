"""How many lines one executor has at the gateways at once, and whose go next.

The window is up to ``most`` lines: halved by each 503 (the pool had no room for batch
work), grown by one per window of answers (additive increase, multiplicative decrease,
as TCP's congestion window). Lines beyond it wait here, rather than each costing the
gateway a refusal and retrying blind.

Waiting lines are let through round robin by tenant, first come first served within a
tenant: when a place frees, the next tenant in turn sends its oldest waiting line, so a
tenant's one line waits for one place, not behind every line another tenant has waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque


class SendWindow:
    def __init__(self, most: int) -> None:
        self.most = most
        self.size = float(most)
        self.sending = 0
        self._waiting: dict[int, deque[asyncio.Future[None]]] = {}
        """Tenant id → its waiting lines, oldest first; the dict's order is the rotation."""

    async def acquire(self, tenant: int = 0) -> None:
        if not self._waiting and self.sending < self._room():
            self.sending += 1
            return
        place = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(place)
        try:
            await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self.release()  # let through, then cancelled before it sent: give it back
            else:
                self._forget(tenant, place)
            raise

    def release(self) -> None:
        self.sending -= 1
        self._let_through()

    def answered(self, *, shed: bool) -> None:
        if shed:
            self.size = max(1.0, self.size / 2)
        else:
            self.size = min(float(self.most), self.size + 1 / self.size)
            self._let_through()

    def _room(self) -> int:
        return max(1, int(self.size))

    def _let_through(self) -> None:
        while self._waiting and self.sending < self._room():
            tenant, waiting = next(iter(self._waiting.items()))
            del self._waiting[tenant]
            place = waiting.popleft()
            if waiting:
                self._waiting[tenant] = waiting  # to the back of the rotation
            if place.done():  # cancelled while waiting
                continue
            self.sending += 1
            place.set_result(None)

    def _forget(self, tenant: int, place: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(tenant)
        if waiting is not None and place in waiting:
            waiting.remove(place)
            if not waiting:
                del self._waiting[tenant]
