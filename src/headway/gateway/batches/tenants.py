"""What a deleted tenant leaves outside the registry, deleted after it: its files (inputs
and outputs, their bytes where no one else's file names them), its batches with their
line results, and its cache entries (its own scope's and its shared group's).

The registry deletes the tenant, its keys and its pins in one transaction, and records
the deletion there (``TenantDeletion``). ``finish`` does the rest in steps, each one
harmless to repeat, so that a process that dies at any point leaves a deletion the
next ``finish`` completes:

1. list the contents the tenant's files name, and record the list with the deletion
   (the first list recorded stays: a later one, made after step 2, would be empty);
2. delete its batches, their results and its file records (one batch-store transaction);
3. delete each listed content that no file record names any more;
4. forget its cache entries;
5. mark the deletion finished: only then may a new tenant have the name, since the
   batch store and the cache still key by name (a new tenant of the name has a new id,
   and no usage of the old one whatever happens here).

``finish_pending`` finishes every deletion not yet finished: each gateway runs it at
start and every ``FINISH_EVERY_S`` (the background loop ``tenant_deletions``), and
``headway tenants finish-deletions`` does it by hand. Queued lines of the deleted
batches are dropped by the executors as they come (their batch is gone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from headway.batches.filestore import FileStore
from headway.batches.offload import off_loop
from headway.batches.store import BatchStore
from headway.registry.model import SYSTEM, TenantDeletion
from headway.registry.store import RegistryStore

log = logging.getLogger(__name__)

FINISH_EVERY_S = 60.0
"""How often a gateway looks for deletions another process left unfinished."""
_PAGE = 1000

ForgetCache = Callable[[str], Awaitable[None]]
"""Drops a tenant's cache entries, by the name the cache scopes them with."""


async def _keep_all(tenant: str) -> None:
    return None


class TenantData:
    """``store`` and ``files`` None: this process serves no Batch API (nothing to delete
    there); ``forget_cache``: the results cache's ``forget_tenant``."""

    def __init__(
        self,
        registry: RegistryStore,
        store: BatchStore | None = None,
        files: FileStore | None = None,
        forget_cache: ForgetCache = _keep_all,
    ) -> None:
        self._registry, self._store, self._files = registry, store, files
        self._forget_cache = forget_cache

    async def finish(self, deletion: TenantDeletion) -> bool:
        """Delete what the deleted tenant left (the module's steps); True when finished,
        False when a step failed (logged; the next ``finish`` goes on from there). The
        audit log's ``tenant.purge`` is the system's, whoever deleted the tenant."""
        name = deletion.name
        try:
            blobs = await self._delete_records(deletion)
            await self._delete_blobs(blobs)
            await self._forget_cache(name)
            await asyncio.to_thread(
                self._registry.finish_deletion, deletion.tenant_id, actor=SYSTEM
            )
        except Exception:
            log.exception(
                "tenant %s (id %d): its deletion stays to finish", name, deletion.tenant_id
            )
            return False
        log.info(
            "tenant %s (id %d): its batches, files (%d contents) and cache entries are deleted",
            name,
            deletion.tenant_id,
            len(blobs),
        )
        return True

    async def finish_pending(self) -> int:
        """Finish every deletion not yet finished; how many are finished now."""
        pending = await asyncio.to_thread(self._registry.tenant_deletions)
        finished = 0
        for deletion in pending:
            finished += await self.finish(deletion)
        return finished

    async def _delete_records(self, deletion: TenantDeletion) -> tuple[str, ...]:
        """Steps 1 and 2: the listed contents (empty without a batch store)."""
        store = self._store
        if store is None:
            return ()
        blobs = deletion.blobs
        if blobs is None:
            listed = await off_loop(_contents_of, store, deletion.name)
            recorded = await asyncio.to_thread(
                self._registry.list_deletion_blobs, deletion.tenant_id, listed
            )
            blobs = recorded.blobs or ()
        await off_loop(store.delete_tenant, deletion.name)
        return blobs

    async def _delete_blobs(self, blobs: tuple[str, ...]) -> None:
        """Step 3: a content another tenant's file names stays."""
        store, files = self._store, self._files
        if store is None or files is None:
            return
        for digest in blobs:
            if not await off_loop(store.digest_in_use, digest):
                await off_loop(files.delete, digest)


def _contents_of(store: BatchStore, tenant: str) -> tuple[str, ...]:
    """Every content a file record of the tenant names, sorted, a page at a time."""
    digests: set[str] = set()
    after: str | None = None
    while True:
        page = store.files(tenant, limit=_PAGE, after=after, order="asc")
        digests.update(file.sha256 for file in page)
        if len(page) < _PAGE:
            return tuple(sorted(digests))
        after = page[-1].id
