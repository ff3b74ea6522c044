"""Which tenants the cache answered whole within the last window, in bounded memory.

``RequestCache.may_answer`` lets a full pool parse a tenant's request (instead of
refusing it before the body is read) while the cache answered that tenant a whole
request within ``window_s``. The state is per tenant: one tenant's repeated texts
switch the shortcut on for itself only, and no tenant can read from its own refusals
whether another's requests are being answered by the cache.

An ``OrderedDict`` from tenant to the time it was last marked, oldest first. ``mark``
moves the tenant to the end, then drops from the front every tenant marked longer than
``window_s`` ago and, past ``capacity``, the oldest. Invariant: at most ``capacity``
tenants are held, whatever the number of tenants. A tenant dropped early reads as not
marked, so its full pool refuses before parsing, as without a cache: the bound fails
towards shedding, never towards skipping it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
"""How a tenant is named here: by its id on the request path."""

MAX_TENANTS = 4096
"""Tenants remembered at once: ~0.5 MB at most, far above those with a whole hit in a second."""


class RecentHits(Generic[K]):
    def __init__(self, window_s: float, capacity: int = MAX_TENANTS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 tenant, not {capacity}")
        self.window_s = window_s
        self.capacity = capacity
        self._marked: OrderedDict[K, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._marked)

    def mark(self, tenant: K, now: float) -> None:
        marked = self._marked
        marked[tenant] = now
        marked.move_to_end(tenant)
        oldest = now - self.window_s
        while marked and (len(marked) > self.capacity or next(iter(marked.values())) <= oldest):
            marked.popitem(last=False)

    def recent(self, tenant: K, now: float) -> bool:
        """Whether ``tenant`` was marked less than ``window_s`` before ``now``."""
        at = self._marked.get(tenant)
        return at is not None and now - at < self.window_s

    def forget(self, tenant: K) -> None:
        self._marked.pop(tenant, None)
