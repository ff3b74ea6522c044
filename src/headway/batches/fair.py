"""Round robin across tenants: whose queued items one pull hands out, in what order (pure).

Both work queues pull this way (``sqlite_queue.py``, ``jetstream_queue.py``). The tenants
with items are visited in one fixed order (sorted), starting just after the tenant that
the puller's last pull served last, and each gives one item per round, while it has
items left and room (``queue.Room``), until the pull is full. So a tenant with a million
lines queued and a tenant with one line both progress: the one line goes out in the next
pull that has a free place, not after the million; and a run of one-item pulls (an
executor refilling one freed slot at a time) visits every tenant in turn.

Rounds count items (lines), not texts: the per-tenant cap on lines in flight is what
keeps a tenant of large lines from holding every slot.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=str)
H = TypeVar("H", bound=Hashable)


def rotation(keys: Iterable[K], after: K | None) -> list[K]:
    """``keys`` sorted, starting with the first one after ``after`` and wrapping round, so
    ``after`` itself (if present) comes last."""
    ordered = sorted(set(keys))
    if after is None:
        return ordered
    later = [key for key in ordered if key > after]
    return later + [key for key in ordered if key <= after]


def round_robin(offers: Sequence[tuple[H, int]], total: int) -> list[H]:
    """The key of each item handed out, in the order they go: one of each key per round,
    in ``offers``' order, while it has some of its offered number left, up to ``total``."""
    keys = [key for key, count in offers if count > 0]
    left = [count for _, count in offers if count > 0]
    order: list[H] = []
    while keys and len(order) < total:
        for index, key in enumerate(keys):
            if len(order) == total:
                break
            order.append(key)
            left[index] -= 1
        keys = [key for key, count in zip(keys, left, strict=True) if count > 0]
        left = [count for count in left if count > 0]
    return order
