"""Uploads in progress on this gateway, bounded per tenant and in all.

An upload holds a temporary file, a thread's turns and a slice of the disk's bandwidth for
as long as its client takes to send it; without a bound one tenant (or many keys of one)
could hold every one. ``UploadSlots.take`` is asked after the key is checked and before
any byte of the body is read; a refusal is a value (``SlotsFull``) until the route turns
it into a 429 with ``Retry-After``. One event loop owns the counts (no lock). Tenants are
counted by id, so a tenant created with a deleted one's name never waits for its uploads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RETRY_AFTER_S = 5.0
"""When a refused upload may try again: uploads take seconds."""


@dataclass(frozen=True, slots=True)
class SlotsFull:
    """Which bound refused an upload: the tenant's, or the gateway's; its value and use."""

    bound: Literal["tenant", "gateway"]
    allowed: int
    used: int


class UploadSlots:
    def __init__(self, per_tenant: int, total: int) -> None:
        self._per_tenant, self._total = per_tenant, total
        self._by_tenant: dict[int, int] = {}
        self._in_use = 0

    def take(self, tenant: int) -> SlotsFull | None:
        """A slot for one upload of ``tenant`` (give it back with ``give_back``), or the
        bound that is full."""
        mine = self._by_tenant.get(tenant, 0)
        if mine >= self._per_tenant:
            return SlotsFull("tenant", self._per_tenant, mine)
        if self._in_use >= self._total:
            return SlotsFull("gateway", self._total, self._in_use)
        self._by_tenant[tenant] = mine + 1
        self._in_use += 1
        return None

    def give_back(self, tenant: int) -> None:
        left = self._by_tenant[tenant] - 1
        if left:
            self._by_tenant[tenant] = left
        else:
            del self._by_tenant[tenant]
        self._in_use -= 1

    def in_use(self, tenant: int | None = None) -> int:
        """Uploads in progress: the tenant's, or all."""
        return self._in_use if tenant is None else self._by_tenant.get(tenant, 0)
