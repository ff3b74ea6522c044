"""What one tenant may keep on the Batch API, and the answer when a bound is reached.

A tenant's bounds are the gateway's settings (``batches.max_files_per_tenant``,
``max_stored_bytes_per_tenant``, ``max_open_batches_per_tenant``) unless the registry
holds the tenant's own (``registry.model.BatchLimits``, set with ``headway tenants set``
or ``PATCH /admin/tenants/{name}``). The store checks them where it writes
(``BatchStore.add_file``, ``add_batch``), so two requests racing for the last slot cannot
both pass; a route may check them sooner too, to refuse before it reads a body.

Statuses are chosen for what a client library does with them: a full store of files is a
400 (``StorageLimitReached``, as OpenAI answers its storage limit; clients do not retry,
and waiting frees nothing: files must be deleted), too many open batches a 429 with
``Retry-After`` (``LimitReached``, as OpenAI answers its batch queue limit: batches finish,
so a retry later succeeds). Each message names the bound and the use it found.
"""

from __future__ import annotations

from headway.batches.model import OverLimit, TenantBounds, TenantUse
from headway.errors import HeadwayError, LimitReached, StorageLimitReached
from headway.registry.model import Tenant
from headway.settings import BatchSettings

OPEN_BATCHES_RETRY_AFTER_S = 60.0
"""When a tenant at its open batches may try again: batches take minutes at the least."""


def bounds_of(tenant: Tenant, settings: BatchSettings) -> TenantBounds:
    own = tenant.batch_limits
    return TenantBounds(
        settings.max_files_per_tenant if own.max_files is None else own.max_files,
        settings.max_stored_bytes_per_tenant
        if own.max_stored_bytes is None
        else own.max_stored_bytes,
        settings.max_open_batches_per_tenant
        if own.max_open_batches is None
        else own.max_open_batches,
    )


def full_before_upload(bounds: TenantBounds, use: TenantUse) -> OverLimit | None:
    """The bound a tenant keeping ``use`` has no room left under for another file (a file
    of at least one byte), before any of it is read."""
    if use.files >= bounds.max_files:
        return OverLimit("max_files", bounds.max_files, use.files)
    if use.stored_bytes >= bounds.max_stored_bytes:
        return OverLimit("max_stored_bytes", bounds.max_stored_bytes, use.stored_bytes)
    return None


def refusal(over: OverLimit, *, file_bytes: int | None = None) -> HeadwayError:
    """The answer to a write ``over`` refused; ``file_bytes``: the size of the upload that
    would have passed the stored-bytes bound, when known."""
    if over.limit == "max_open_batches":
        return LimitReached(
            f"this tenant has {over.used} batches not yet finished; its limit is"
            f" {over.allowed} (max_open_batches): retry when one has finished, or cancel one",
            retry_after_s=OPEN_BATCHES_RETRY_AFTER_S,
        )
    if over.limit == "max_files":
        return StorageLimitReached(
            f"this tenant keeps {over.used} files; its limit is {over.allowed} (max_files):"
            " delete files it no longer needs (DELETE /v1/files/{file_id})"
        )
    adding = "" if file_bytes is None else f", and this file has {file_bytes} more"
    return StorageLimitReached(
        f"this tenant keeps {over.used} bytes of files{adding}; its limit is {over.allowed}"
        " bytes (max_stored_bytes): delete files it no longer needs (DELETE /v1/files/{file_id})"
    )
