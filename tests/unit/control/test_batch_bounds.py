"""A tenant's Batch API bounds (its own rule or the setting), the answers when one is
reached, and the cap on uploads at once."""

from __future__ import annotations

from headway.batches.model import OverLimit, TenantBounds, TenantUse
from headway.control.batches.bounds import bounds_of, full_before_upload, refusal
from headway.control.batches.uploads import SlotsFull, UploadSlots
from headway.errors import LimitReached, StorageLimitReached
from headway.http.asgi import error_response
from headway.registry.model import BatchLimits, Tenant
from headway.settings import BatchSettings

SETTINGS = BatchSettings(
    max_files_per_tenant=10, max_stored_bytes_per_tenant=1000, max_open_batches_per_tenant=3
)


def tenant(**own: int | None) -> Tenant:
    return Tenant(1, "acme", "batch", 1.0, 1.0, BatchLimits(**own))


def test_a_tenants_own_bound_wins_and_the_setting_fills_the_rest() -> None:
    assert bounds_of(tenant(), SETTINGS) == TenantBounds(10, 1000, 3)
    assert bounds_of(tenant(max_files=0, max_open_batches=50), SETTINGS) == TenantBounds(
        0, 1000, 50
    )


def test_an_upload_is_refused_before_its_body_only_when_no_room_is_left() -> None:
    bounds = TenantBounds(10, 1000, 3)
    assert full_before_upload(bounds, TenantUse(9, 999, 3)) is None
    assert full_before_upload(bounds, TenantUse(10, 0, 0)) == OverLimit("max_files", 10, 10)
    over = full_before_upload(bounds, TenantUse(1, 1000, 0))
    assert over == OverLimit("max_stored_bytes", 1000, 1000)


def test_storage_is_a_400_clients_do_not_retry_and_open_batches_a_429_they_retry_later() -> None:
    files = refusal(OverLimit("max_files", 10, 10))
    assert isinstance(files, StorageLimitReached) and files.status == 400
    assert "keeps 10 files; its limit is 10 (max_files)" in files.message
    stored = refusal(OverLimit("max_stored_bytes", 1000, 900), file_bytes=200)
    assert "keeps 900 bytes of files, and this file has 200 more; its limit is 1000" in (
        stored.message
    )
    batches = refusal(OverLimit("max_open_batches", 3, 3))
    assert isinstance(batches, LimitReached) and batches.status == 429
    answer = error_response(batches)
    assert answer.headers["retry-after"] == "60"
    assert b"has 3 batches not yet finished; its limit is 3 (max_open_batches)" in answer.body


def test_uploads_at_once_are_bounded_per_tenant_and_in_all_and_given_back() -> None:
    slots = UploadSlots(per_tenant=2, total=3)  # tenants by id
    assert slots.take(1) is None and slots.take(1) is None
    assert slots.take(1) == SlotsFull("tenant", 2, 2)
    assert slots.take(2) is None
    assert slots.take(3) == SlotsFull("gateway", 3, 3)
    slots.give_back(1)
    assert slots.in_use(1) == 1 and slots.in_use() == 2
    assert slots.take(3) is None
    for tenant_id in (1, 2, 3):
        slots.give_back(tenant_id)
    assert slots.in_use() == 0 and slots.in_use(1) == 0
