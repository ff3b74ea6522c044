"""What a deleted tenant leaves outside the registry, deleted with it: its files (inputs
and outputs, their bytes where no one else's file names them), its batches with their
line results, and, when the cache is scoped by tenant, its cache entries.

Queued lines of its batches are dropped by the executors as they come (their batch is
gone). With the cache in ``global`` scope an entry belongs to no tenant (a vector of a
text, keyed by its hash, shared by everyone who sent that text), so none is deleted.
"""

from __future__ import annotations

import logging

from headway.batches.offload import off_loop
from headway.gateway.batches.parts import BatchParts
from headway.gateway.stages.cache import RequestCache

log = logging.getLogger(__name__)


class TenantData:
    def __init__(self, batches: BatchParts | None, cache: RequestCache) -> None:
        self._batches, self._cache = batches, cache

    async def delete(self, tenant: str) -> None:
        batches = self._batches
        if batches is not None:
            digests = await off_loop(batches.store.delete_tenant, tenant)
            for digest in digests:
                await off_loop(batches.files.delete, digest)
            log.info("tenant %s: deleted its batches and files (%d blobs)", tenant, len(digests))
        await self._cache.forget_tenant(tenant)
