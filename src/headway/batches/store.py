"""The batch store's one interface: file records, batches and their lines' results.

Gateways (``/v1/files``, ``/v1/batches``) and executors share one database: the embedded
SQLite file, or Postgres in shared mode (``sql.py``). Calls are synchronous (callers use
``asyncio.to_thread``), each one transaction. Races between processes are decided in the
database, never by a read then a write: ``move`` is a compare-and-set on a batch's status
(of two movers exactly one gets the new ``Batch``), and ``record`` keeps a line's first
result only, counted once. Reads by tenant take its id and treat another tenant's ids as
absent (a route answers 404 without saying whether the id exists); rows from before
tenant ids are nobody's until ``adopt`` (``migrations.py``). Times are unix seconds.

    BatchStoreError
    ├── BatchStoreUnavailable  the database cannot be reached, or stayed locked past the timeout
    ├── BatchSchemaTooNew      the database was migrated by newer code than this
    └── UnknownBatch           a result recorded for a batch the store does not hold
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Literal, Protocol

from headway.batches.model import (
    Batch,
    BatchStatus,
    FileObject,
    LineError,
    LineResult,
    OverLimit,
    TenantBounds,
    TenantUse,
)


class BatchStoreError(Exception):
    """The batch store refused a call, or could not make it; the message says which."""


class BatchStoreUnavailable(BatchStoreError):
    """The batch store's database cannot be reached, or stayed locked past the timeout."""


class BatchSchemaTooNew(BatchStoreError):
    """The database holds batch migrations this code does not know: run the newer code."""


class UnknownBatch(BatchStoreError):
    """No batch has that id (it was never added, or its tenant was deleted)."""


class BatchStore(Protocol):
    # files -------------------------------------------------------------------------

    def add_file(
        self,
        file: FileObject,
        bounds: TenantBounds | None = None,
        *,
        place: Callable[[], None] | None = None,
    ) -> OverLimit | None:
        """Add a record; one whose id exists already is left as it is (output and error
        files have derived ids, and a batch may be finalized twice).

        With ``bounds`` (an upload's), add it only if the tenant then keeps at most
        ``max_files`` files and ``max_stored_bytes`` bytes, checked under the tenant's lock;
        else write nothing and return the bound broken. ``place`` (a ``FileWriter``'s) puts
        the bytes under ``file.sha256``: called once the bounds passed, inside the
        transaction and under the content's lock, so no ``release_content`` falls between
        the bytes found in place and the commit; not called when a bound refuses."""
        ...

    def release_content(self, sha256: str, delete: Callable[[str], None]) -> bool:
        """If no file record names the content, ``delete(sha256)`` (the file store's)
        inside a transaction holding the content's lock; whether it was called. An
        ``add_file`` of the same content either committed before (its record is seen, and
        nothing is deleted) or places its bytes after (finds them gone and puts its own)."""
        ...

    def usage(self, tenant_id: int) -> TenantUse:
        """What the tenant keeps now (one consistent read)."""
        ...

    def file(self, tenant_id: int, file_id: str) -> FileObject | None:
        """None: absent, or another tenant's."""
        ...

    def files(
        self,
        tenant_id: int,
        *,
        purpose: str | None = None,
        limit: int = 10000,
        after: str | None = None,
        order: Literal["asc", "desc"] = "desc",
    ) -> list[FileObject]:
        """The tenant's files by (created_at, id) in ``order``, from just past the file
        ``after`` (a cursor: an id that is not one of the tenant's files lists nothing)."""
        ...

    def delete_file(self, tenant_id: int, file_id: str) -> FileObject | None:
        """The deleted record; None if the tenant has no file of that id."""
        ...

    def expired_files(self, now: int, limit: int = 1000) -> list[FileObject]:
        """Files whose ``expires_at <= now``, the longest expired first (the reaper's)."""
        ...

    def delete_file_by_id(self, file_id: str) -> FileObject | None:
        """The reaper's delete, of any tenant's file: the deleted record, or None."""
        ...

    def digest_in_use(self, sha256: str) -> bool:
        """Whether any file record still names this content (a read: to delete content,
        ``release_content``, which decides under the content's lock)."""
        ...

    # batches -----------------------------------------------------------------------

    def add_batch(self, batch: Batch, max_open: int | None = None) -> OverLimit | None:
        """``BatchStoreError`` if a batch has that id already. With ``max_open``, the batch
        is added only if the tenant then has at most that many batches not yet final (the
        check holds the tenant's lock, as ``add_file``'s); else the bound is returned."""
        ...

    def batch(self, tenant_id: int, batch_id: str) -> Batch | None:
        """None: absent, or another tenant's."""
        ...

    def batch_by_id(self, batch_id: str) -> Batch | None:
        """The executor's read, of any tenant's batch."""
        ...

    def batches(self, tenant_id: int, *, limit: int = 20, after: str | None = None) -> list[Batch]:
        """Newest first (created_at, then id, descending), from just past the batch
        ``after`` (an id that is not one of the tenant's batches lists nothing)."""
        ...

    def batches_in(
        self,
        statuses: Collection[BatchStatus],
        limit: int = 100,
        after: tuple[int, str] | None = None,
    ) -> list[Batch]:
        """Any tenant's batches in one of ``statuses``, oldest first (created_at, then id),
        from just past ``after`` (a cursor: the last page's last ``(created_at, id)``)."""
        ...

    def move(
        self,
        batch_id: str,
        from_: Collection[BatchStatus],
        to: BatchStatus,
        at: int,
        *,
        total: int | None = None,
        errors: Sequence[LineError] | None = None,
        output_file_id: str | None = None,
        error_file_id: str | None = None,
    ) -> Batch | None:
        """Compare-and-set: if the status is one of ``from_``, set it to ``to``, stamp
        ``TIMESTAMP_OF[to]`` with ``at`` and set the fields given (not None), in one
        statement; the new ``Batch``. None when the status was not in ``from_`` (another
        process moved it first) or there is no such batch."""
        ...

    # line results ------------------------------------------------------------------

    def record(self, batch_id: str, result: LineResult) -> bool:
        """Keep the line's result if it has none yet, and count it in the batch's
        ``counts.completed`` (ok) or ``counts.failed`` in the same transaction; True if
        this call kept it, False if the line had a result already (nothing changes).
        ``UnknownBatch`` if there is no such batch."""
        ...

    def record_many(self, batch_id: str, results: Sequence[LineResult]) -> int:
        """``record`` for many lines in one transaction (a file's validation errors);
        how many were new. Of two results for one line in ``results``, the first counts."""
        ...

    def results(self, batch_id: str) -> Iterator[LineResult]:
        """Every recorded result in line order, read a page at a time (a page's
        transaction ends before the next is read), so a large batch is never in memory
        whole."""
        ...

    def recorded(self, batch_id: str, lines: Collection[int]) -> set[int]:
        """Which of ``lines`` have a result."""
        ...

    # tenants -----------------------------------------------------------------------

    def delete_tenant(self, tenant_id: int) -> list[str]:
        """Remove the tenant's files, batches and their results in one transaction; the
        digests of its files that no file record names any more, sorted (the caller
        deletes those from the file store)."""
        ...

    def legacy_tenants(self) -> list[str]:
        """The names that rows from before tenant ids (``LEGACY_TENANT_ID``) carry, sorted."""
        ...

    def adopt(self, tenant: str, tenant_id: int) -> int:
        """Give the legacy rows (files and batches) of the name ``tenant`` to the tenant
        ``tenant_id``, in one transaction; how many rows."""
        ...

    def close(self) -> None:
        """Release any connection held between calls (the next call opens another)."""
        ...
