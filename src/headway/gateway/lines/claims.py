"""What the executor's token may do: run one line of a live batch, as that batch's tenant.

The token alone would let its holder act as any tenant, under any request id. So each line also
names its batch and line number (``x-headway-batch-id``, ``x-headway-line``), and is served only
if the claim matches the batch store (``claim_refusal``, a pure function of the two): the batch
is ``in_progress``, or ``validating`` (the mover queues a batch's lines just before it moves the
batch on, so its first lines may arrive first), never cancelling or finished; it is the named
tenant's and was created with the named key; the line is one of its (1 … total; any from 1
while validating, which has no total yet); and the request id is that line's own
(``line_request_id``). So a token holder cannot bill under a request id of its choosing, nor as
a tenant with no batch running, nor past the lines of a running batch.

``LiveBatches`` trusts a batch found ``in_progress`` for ``ttl_s`` (one read per batch per
``ttl_s``, not per line); one not found live is read again next time, so a batch just moved to
``in_progress`` serves its first line at once. A cancelled batch may thus run lines for up to
``ttl_s`` more, which the executor's own status check bounds too.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from headway.batches.model import Batch, line_request_id
from headway.batches.offload import off_loop
from headway.batches.store import BatchStore

TTL_S = 1.0
MAX_CACHED = 4096
MAX_LINE = 2**31 - 1
RUNS_LINES = frozenset({"validating", "in_progress"})
"""The statuses whose lines the token may run (only ``in_progress`` is cached)."""


@dataclass(frozen=True, slots=True)
class LineClaim:
    """What a line's headers say it is."""

    batch_id: str
    line: int
    tenant_id: int
    key_id: str
    request_id: str


def claim_refusal(batch: Batch | None, claim: LineClaim) -> str | None:
    """Why the executor's token may not run ``claim`` (None: it may). The messages name
    the batch only as the claim did: nothing of another tenant's is told."""
    if batch is None or batch.tenant_id != claim.tenant_id:
        return f"no batch {claim.batch_id} of tenant {claim.tenant_id}"
    if batch.status not in RUNS_LINES:
        return f"batch {claim.batch_id} is {batch.status}, not in_progress: it runs no line"
    if batch.key_id != claim.key_id:
        return f"batch {claim.batch_id} was not created with key {claim.key_id}"
    last = batch.counts.total if batch.status == "in_progress" else MAX_LINE
    if not 1 <= claim.line <= last:
        return f"batch {claim.batch_id} has no line {claim.line}"
    if claim.request_id != line_request_id(batch.id, claim.line):
        return f"the request id is not that of line {claim.line} of batch {claim.batch_id}"
    return None


class LiveBatches:
    """``claim_refusal`` against the batch store, through the cache above."""

    def __init__(
        self,
        store: BatchStore,
        *,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_cached: int = MAX_CACHED,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._clock = clock
        self._max_cached = max_cached
        self._live: OrderedDict[str, tuple[float, Batch]] = OrderedDict()

    async def refusal(self, claim: LineClaim) -> str | None:
        now = self._clock()
        cached = self._live.get(claim.batch_id)
        if cached is not None and now - cached[0] < self._ttl_s:
            return claim_refusal(cached[1], claim)
        batch = await off_loop(self._store.batch_by_id, claim.batch_id)
        if batch is not None and batch.status == "in_progress":
            self._live[claim.batch_id] = (now, batch)
            self._live.move_to_end(claim.batch_id)
            while len(self._live) > self._max_cached:
                self._live.popitem(last=False)
        else:
            self._live.pop(claim.batch_id, None)
        return claim_refusal(batch, claim)
