"""What a deleted tenant leaves outside the registry, deleted after it.

The registry deletes the tenant, its keys and pins in one transaction and records the deletion
(``TenantDeletion``). Everything here is keyed by the tenant's id, which no later tenant gets, so
a tenant created at once with the name finds none of it. ``finish`` works in steps, each harmless
to repeat, so a process that dies at any point leaves a deletion the next ``finish`` completes:

0. adopt the name's rows from before tenant ids (``legacy.py``): they are this tenant's when
   its deletion is the name's oldest unfinished one;
1. record with the deletion the contents its files name (the first list recorded stays: one
   made after step 2 would be empty);
2. delete its batches, their results and its file records (one batch-store transaction);
3. delete each listed content (its bytes) that no file record names any more;
4. forget its cache entries (its own scope, by id, and its shared group's);
5. mark the deletion finished.

Gateways run ``finish_pending`` every ``FINISH_EVERY_S`` (``adopt_legacy`` alone at start), and
``headway tenants finish-deletions`` by hand. Executors drop the deleted batches' queued lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from headway.batches.filestore import FileStore
from headway.batches.offload import off_loop
from headway.batches.store import BatchStore
from headway.control.batches import legacy
from headway.control.mount import Loop, Mount
from headway.registry.model import SYSTEM, TenantDeletion
from headway.registry.store import RegistryStore

log = logging.getLogger(__name__)

FINISH_EVERY_S = 60.0
"""How often a gateway looks for deletions another process left unfinished."""
_PAGE = 1000

ForgetCache = Callable[[str, int], Awaitable[None]]
"""Drops a tenant's cache entries: by its name (its shared group's) and id (its own)."""


async def _keep_all(name: str, tenant_id: int) -> None:
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
            await self._forget_cache(name, deletion.tenant_id)
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
        """Adopt the legacy rows, then finish every deletion not yet finished; how many
        are finished now."""
        await self.adopt_legacy()
        pending = await asyncio.to_thread(self._registry.tenant_deletions)
        finished = 0
        for deletion in pending:
            finished += await self.finish(deletion)
        return finished

    async def adopt_legacy(self) -> None:
        """Give every name's rows from before tenant ids to their tenants (``legacy.py``);
        logged, never raised: a gateway starts whatever its stores say."""
        if self._store is None:
            return
        try:
            await off_loop(legacy.adopt, self._registry, self._store)
        except Exception:
            log.exception("batch store: rows from before tenant ids not adopted; tried again")

    async def _delete_records(self, deletion: TenantDeletion) -> tuple[str, ...]:
        """Steps 0 to 2: the listed contents (empty without a batch store)."""
        store = self._store
        if store is None:
            return ()
        await off_loop(legacy.adopt, self._registry, store, [deletion.name])
        blobs = deletion.blobs
        if blobs is None:
            listed = await off_loop(_contents_of, store, deletion.tenant_id)
            recorded = await asyncio.to_thread(
                self._registry.list_deletion_blobs, deletion.tenant_id, listed
            )
            blobs = recorded.blobs or ()
        await off_loop(store.delete_tenant, deletion.tenant_id)
        return blobs

    async def _delete_blobs(self, blobs: tuple[str, ...]) -> None:
        """Step 3: a content another tenant's file names stays."""
        store, files = self._store, self._files
        if store is None or files is None:
            return
        for digest in blobs:
            await off_loop(store.release_content, digest, files.delete)


def _contents_of(store: BatchStore, tenant_id: int) -> tuple[str, ...]:
    """Every content a file record of the tenant names, sorted, a page at a time."""
    digests: set[str] = set()
    after: str | None = None
    while True:
        page = store.files(tenant_id, limit=_PAGE, after=after, order="asc")
        digests.update(file.sha256 for file in page)
        if len(page) < _PAGE:
            return tuple(sorted(digests))
        after = page[-1].id


def tenants_mount(data: TenantData) -> Mount:
    """No routes: the rows of tenants deleted before tenant ids adopted at start, and the
    deletions other processes left unfinished finished every ``FINISH_EVERY_S``."""
    return Mount(
        [],
        loops=[Loop("tenant_deletions", FINISH_EVERY_S, data.finish_pending)],
        on_startup=[data.adopt_legacy],
    )
