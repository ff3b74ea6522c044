"""Splitting a request's texts into chunks that run on the replicas in parallel.

Chunks are balanced (sizes differ by at most one) so that the parallel calls
finish together: 40 texts at chunk size 16 become 14 + 13 + 13, not 16 + 16 + 8.
Every chunk of one request carries the same request id, priority (from the
tenant's tier) and model version; its remaining budget is stamped when it is
sent (``dispatch``). Texts already in the results cache will be left out here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from headway import wire
from headway.gateway.context import RequestContext
from headway.registry.model import Tier


@dataclass(slots=True)
class ChunkHeader:
    """What every chunk of one request carries."""

    request_id: str
    priority: wire.Priority
    model_version: str


class Splittable(Protocol):
    """A request whose texts can be cut into chunks (an endpoint's parsed request)."""

    @property
    def texts(self) -> int: ...

    def chunk(self, part: slice, header: ChunkHeader) -> wire.Chunk: ...


@dataclass(slots=True)
class Chunk:
    message: wire.Chunk
    """Its ``timeout_ms`` is stamped by each attempt (``wire.with_budget``)."""
    texts: int


def plan(
    request: Splittable,
    ctx: RequestContext,
    version: str,
    chunk_texts: int,
    at: wire.Priority | None = None,
) -> list[Chunk]:
    """``at``: the chunks' priority when not the tenant's tier's (a shadow copy's)."""
    header = ChunkHeader(ctx.request_id, priority(ctx.tenant.tier) if at is None else at, version)
    return [
        Chunk(request.chunk(part, header), part.stop - part.start)
        for part in split(request.texts, chunk_texts)
    ]


def priority(tier: Tier) -> wire.Priority:
    return wire.Priority.BATCH if tier == "batch" else wire.Priority.INTERACTIVE


def split(n_texts: int, chunk_texts: int) -> list[slice]:
    """Contiguous slices covering ``range(n_texts)`` in order, each at most ``chunk_texts``."""
    if n_texts <= 0:
        return []
    n_chunks = -(-n_texts // chunk_texts)
    base, extra = divmod(n_texts, n_chunks)
    slices = []
    start = 0
    for i in range(n_chunks):
        size = base + (1 if i < extra else 0)
        slices.append(slice(start, start + size))
        start += size
    return slices
