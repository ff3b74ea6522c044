"""The batch store's contract (``BatchStore``), the same on SQLite and on Postgres."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from headway.batches.model import (
    TIMESTAMP_OF,
    Batch,
    BatchStatus,
    FileObject,
    LineError,
    LineResult,
    OverLimit,
    RequestCounts,
    TenantBounds,
    TenantUse,
)
from headway.batches.open import open_batch_store, postgres_batch_store, sqlite_batch_store
from headway.batches.sql import SqlBatchStore
from headway.batches.store import BatchStore, BatchStoreError, BatchStoreUnavailable, UnknownBatch
from headway.settings import Settings
from headway_tools.testing.server import free_port
from tests.batches.conftest import Backend

T = TypeVar("T")

DIGEST_X = "a" * 64
DIGEST_Y = "b" * 64
DIGEST_Z = "c" * 64
ACME, GLOBEX, OTHER = 1, 2, 3
"""Tenants' ids (the registry's ``Tenant.id``), what the store keys everything by."""
NAMES = {ACME: "acme", GLOBEX: "globex", OTHER: "other"}


def name_of(tenant_id: int) -> str:
    return NAMES.get(tenant_id, f"tenant-{tenant_id}")


def a_file(
    file_id: str,
    tenant: int = ACME,
    created_at: int = 100,
    *,
    purpose: str = "batch",
    sha256: str = DIGEST_X,
    expires_at: int | None = None,
) -> FileObject:
    return FileObject(
        file_id,
        tenant,
        name_of(tenant),
        "batch_output" if purpose == "batch_output" else "batch",
        f"{file_id}.jsonl",
        1234,
        sha256,
        created_at,
        expires_at,
        lines=7,
    )


def a_batch(
    batch_id: str,
    tenant: int = ACME,
    created_at: int = 100,
    status: BatchStatus = "validating",
) -> Batch:
    return Batch(
        batch_id,
        tenant,
        name_of(tenant),
        "0123456789abcdef",
        "/v1/embeddings",
        "file-input",
        "24h",
        status,
        created_at,
        created_at + 86400,
    )


def ok(line: int, data: bytes | None = None) -> LineResult:
    return LineResult(line, True, data if data is not None else f'{{"line": {line}}}'.encode())


def failed(line: int) -> LineResult:
    return LineResult(line, False, f'{{"line": {line}, "error": "x"}}'.encode())


def at_once(calls: list[Callable[[], T]]) -> list[T]:
    """Run each call on its own thread, released together; their results in order."""
    start = threading.Barrier(len(calls))
    results: dict[int, T] = {}
    failures: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    return [results[index] for index in range(len(calls))]


def test_the_store_is_a_batch_store(store: SqlBatchStore, backend: Backend) -> None:
    checked: BatchStore = store  # mypy checks the protocol; this checks it runs
    assert checked.files(ACME) == []
    assert store.database == backend.kind


# files -----------------------------------------------------------------------------


def test_a_file_is_read_back_by_its_tenant_only(store: SqlBatchStore) -> None:
    record = a_file("file-1", expires_at=500)
    store.add_file(record)
    assert store.file(ACME, "file-1") == record
    assert store.file(GLOBEX, "file-1") is None
    assert store.file(ACME, "file-2") is None
    assert store.files(GLOBEX) == []


def test_adding_a_file_id_again_keeps_the_first_record(store: SqlBatchStore) -> None:
    record = a_file("file-1")
    store.add_file(record)
    store.add_file(replace(record, filename="second.jsonl", bytes=1))
    assert store.file(ACME, "file-1") == record


def test_a_tenant_deletes_its_own_files_only(store: SqlBatchStore) -> None:
    record = a_file("file-1")
    store.add_file(record)
    assert store.delete_file(GLOBEX, "file-1") is None
    assert store.file(ACME, "file-1") == record
    assert store.delete_file(ACME, "file-1") == record
    assert store.file(ACME, "file-1") is None
    assert store.delete_file(ACME, "file-1") is None


def test_files_list_by_creation_then_id_and_page_by_cursor(store: SqlBatchStore) -> None:
    records = [
        a_file("file-c", created_at=100),
        a_file("file-a", created_at=200),
        a_file("file-b", created_at=200),  # same second: the id orders them
        a_file("file-d", created_at=300, purpose="batch_output"),
    ]
    for record in reversed(records):
        store.add_file(record)
    store.add_file(a_file("file-z", GLOBEX, created_at=250))
    newest_first = list(reversed(records))
    assert store.files(ACME) == newest_first
    assert store.files(ACME, order="asc") == records
    assert store.files(ACME, limit=2) == newest_first[:2]
    assert store.files(ACME, limit=2, after="file-b") == newest_first[2:]
    assert store.files(ACME, after="file-a", order="asc") == records[2:]
    assert store.files(ACME, after="file-d") == newest_first[1:]
    assert store.files(ACME, after="file-c") == []
    pages: list[FileObject] = []
    cursor: str | None = None
    while page := store.files(ACME, limit=1, after=cursor, order="asc"):
        pages += page
        cursor = page[-1].id
    assert pages == records


def test_a_cursor_that_is_not_the_tenants_file_lists_nothing(store: SqlBatchStore) -> None:
    store.add_file(a_file("file-a", created_at=200))
    store.add_file(a_file("file-z", GLOBEX, created_at=300))
    assert store.files(ACME, after="file-z") == []
    assert store.files(ACME, after="file-nope") == []


def test_files_filter_by_purpose(store: SqlBatchStore) -> None:
    uploaded = a_file("file-in", created_at=100)
    written = a_file("file-out", created_at=200, purpose="batch_output")
    store.add_file(uploaded)
    store.add_file(written)
    assert store.files(ACME, purpose="batch") == [uploaded]
    assert store.files(ACME, purpose="batch_output") == [written]
    assert store.files(ACME, purpose="batch_output", after="file-out") == []


def test_expired_files_are_those_due_by_now_longest_expired_first(store: SqlBatchStore) -> None:
    kept = a_file("file-kept", expires_at=None)
    due = [a_file("file-2", expires_at=200), a_file("file-1", GLOBEX, expires_at=100)]
    later = a_file("file-3", expires_at=300)
    for record in (kept, *due, later):
        store.add_file(record)
    assert store.expired_files(99) == []
    assert store.expired_files(200) == list(reversed(due))
    assert store.expired_files(10**9, limit=1) == [due[1]]
    assert store.expired_files(10**9) == [due[1], due[0], later]
    assert store.delete_file_by_id("file-1") == due[1]  # any tenant's
    assert store.delete_file_by_id("file-1") is None
    assert store.expired_files(200) == [due[0]]


def test_a_digest_is_in_use_while_any_record_names_it(store: SqlBatchStore) -> None:
    store.add_file(a_file("file-1", sha256=DIGEST_X))
    store.add_file(a_file("file-2", GLOBEX, sha256=DIGEST_X))
    assert not store.digest_in_use(DIGEST_Y)
    store.delete_file(ACME, "file-1")
    assert store.digest_in_use(DIGEST_X)
    store.delete_file_by_id("file-2")
    assert not store.digest_in_use(DIGEST_X)


# batches ---------------------------------------------------------------------------


def test_a_batch_is_read_back_whole_by_its_tenant_or_the_executor(store: SqlBatchStore) -> None:
    batch = replace(
        a_batch("batch_1"),
        metadata={"job": "nightly", "ünï": "✓"},
        counts=RequestCounts(10, 3, 2),
        errors=(LineError(2, "invalid_json", "line 2 is not JSON"), LineError(5, "x", "y", "p")),
        output_file_id="file-out",
        error_file_id="file-err",
        in_progress_at=101,
        cancelling_at=102,
    )
    store.add_batch(batch)
    assert store.batch(ACME, "batch_1") == batch
    assert store.batch_by_id("batch_1") == batch
    assert store.batch(GLOBEX, "batch_1") is None
    assert store.batch_by_id("batch_2") is None
    assert store.batches(GLOBEX) == []


def test_adding_a_batch_id_twice_is_refused(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1"))
    with pytest.raises(BatchStoreError, match="batch_1 exists already"):
        store.add_batch(a_batch("batch_1", GLOBEX))
    assert store.batch(ACME, "batch_1") == a_batch("batch_1")


def test_batches_list_newest_first_and_page_by_cursor(store: SqlBatchStore) -> None:
    oldest_first = [
        a_batch("batch_c", created_at=100),
        a_batch("batch_a", created_at=200),
        a_batch("batch_b", created_at=200),
        a_batch("batch_d", created_at=300),
    ]
    for batch in oldest_first:
        store.add_batch(batch)
    store.add_batch(a_batch("batch_z", GLOBEX, created_at=250))
    newest_first = list(reversed(oldest_first))
    assert store.batches(ACME) == newest_first
    assert store.batches(ACME, limit=2) == newest_first[:2]
    assert store.batches(ACME, limit=2, after="batch_b") == newest_first[2:]
    assert store.batches(ACME, after="batch_c") == []
    assert store.batches(ACME, after="batch_z") == []  # another tenant's cursor


def test_batches_in_statuses_oldest_first_across_tenants(store: SqlBatchStore) -> None:
    running = [
        a_batch("batch_2", GLOBEX, created_at=100, status="in_progress"),
        a_batch("batch_1", created_at=200, status="in_progress"),
    ]
    cancelling = a_batch("batch_3", created_at=150, status="cancelling")
    store.add_batch(a_batch("batch_4", created_at=50, status="completed"))
    for batch in (*running, cancelling):
        store.add_batch(batch)
    assert store.batches_in({"in_progress"}) == running
    assert store.batches_in(["in_progress", "cancelling"]) == [running[0], cancelling, running[1]]
    assert store.batches_in({"in_progress"}, limit=1) == running[:1]
    assert store.batches_in(()) == []
    both = ["in_progress", "cancelling"]  # paged: from just past a cursor
    assert store.batches_in(both, limit=1, after=(100, "batch_2")) == [cancelling]
    assert store.batches_in(both, after=(150, "batch_3")) == [running[1]]
    assert store.batches_in(both, after=(150, "batch_0")) == [cancelling, running[1]]
    assert store.batches_in(both, after=(200, "batch_1")) == []


def test_move_from_the_expected_status_stamps_and_sets_its_fields(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1"))
    moved = store.move("batch_1", {"validating"}, "in_progress", 111, total=9)
    assert moved == replace(
        a_batch("batch_1"), status="in_progress", in_progress_at=111, counts=RequestCounts(9)
    )
    assert store.batch_by_id("batch_1") == moved
    errors = [LineError(3, "invalid_json", "not JSON")]
    finished = store.move(
        "batch_1",
        ("in_progress", "finalizing"),
        "completed",
        222,
        errors=errors,
        output_file_id="file-out",
        error_file_id="file-err",
    )
    assert finished == replace(
        moved,
        status="completed",
        completed_at=222,
        errors=tuple(errors),
        output_file_id="file-out",
        error_file_id="file-err",
    )


def test_move_from_another_status_changes_nothing(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1", status="in_progress"))
    assert store.move("batch_1", {"validating"}, "in_progress", 111, total=9) is None
    assert store.move("batch_1", (), "failed", 111) is None
    assert store.move("batch_nope", {"in_progress"}, "failed", 111) is None
    assert store.batch_by_id("batch_1") == a_batch("batch_1", status="in_progress")


@pytest.mark.parametrize("to", sorted(TIMESTAMP_OF))
def test_a_move_stamps_the_field_of_its_status_only(store: SqlBatchStore, to: BatchStatus) -> None:
    store.add_batch(a_batch("batch_1"))
    moved = store.move("batch_1", {"validating"}, to, 4242)
    assert moved is not None
    stamps = {field: getattr(moved, field) for field in TIMESTAMP_OF.values()}
    assert stamps == {field: 4242 if field == TIMESTAMP_OF[to] else None for field in stamps}


def test_of_two_stores_moving_a_batch_at_once_exactly_one_wins(backend: Backend) -> None:
    first, second = backend.open_another(), backend.open_another()
    rounds = 15
    for n in range(rounds):
        first.add_batch(a_batch(f"batch_{n}", status="in_progress"))
    for n in range(rounds):
        outcomes = at_once(
            [
                partial(mover.move, f"batch_{n}", {"in_progress"}, "finalizing", at)
                for mover, at in ((first, 1), (second, 2))
            ]
        )
        winners = [o for o in outcomes if o is not None]
        assert len(winners) == 1, f"round {n}: {outcomes}"
        assert first.batch_by_id(f"batch_{n}") == winners[0]


# line results ----------------------------------------------------------------------


def test_a_line_is_recorded_once_and_counted_once(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1", status="in_progress"))
    assert store.record("batch_1", ok(1, b'{"first": true}'))
    assert not store.record("batch_1", failed(1))  # a retry's answer: ignored
    assert not store.record("batch_1", ok(1, b'{"second": true}'))
    assert store.record("batch_1", failed(2))
    batch = store.batch_by_id("batch_1")
    assert batch is not None and batch.counts == RequestCounts(0, 1, 1)
    assert list(store.results("batch_1")) == [ok(1, b'{"first": true}'), failed(2)]


def test_results_of_a_batch_the_store_does_not_hold_are_refused(
    store: SqlBatchStore, backend: Backend
) -> None:
    with pytest.raises(UnknownBatch, match="batch_nope"):
        store.record("batch_nope", ok(1))
    with pytest.raises(UnknownBatch):
        store.record_many("batch_nope", [ok(1), failed(2)])
    assert backend.sql("SELECT count(*) FROM batch_results") == [(0,)]


def test_record_many_keeps_only_new_lines_and_the_first_of_repeats(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1"))
    store.record("batch_1", ok(2))
    lines = [failed(5), failed(2), ok(3), ok(5, b"second five"), failed(7)]
    assert store.record_many("batch_1", lines) == 3
    assert store.record_many("batch_1", lines) == 0
    assert store.record_many("batch_1", []) == 0
    batch = store.batch_by_id("batch_1")
    assert batch is not None and batch.counts == RequestCounts(0, 2, 2)
    assert list(store.results("batch_1")) == [ok(2), ok(3), failed(5), failed(7)]
    assert store.recorded("batch_1", {1, 2, 3, 4, 5, 6, 7, 8}) == {2, 3, 5, 7}
    assert store.recorded("batch_1", []) == set()
    assert store.recorded("batch_2", {2}) == set()


def test_record_many_of_more_lines_than_one_statement_holds(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1"))
    lines = [ok(n) if n % 3 else failed(n) for n in range(1, 1202)]
    assert store.record_many("batch_1", lines) == 1201
    batch = store.batch_by_id("batch_1")
    assert batch is not None and batch.counts == RequestCounts(0, 801, 400)
    assert store.recorded("batch_1", range(1, 1300)) == set(range(1, 1202))


def test_two_stores_recording_the_same_lines_at_once_count_each_once(backend: Backend) -> None:
    first, second = backend.open_another(), backend.open_another()
    first.add_batch(a_batch("batch_1", status="in_progress"))
    lines = 100

    def record_all(store: SqlBatchStore) -> int:
        """Both go through the lines in one order, so they race for each line."""
        return sum(
            store.record("batch_1", ok(line) if line % 2 else failed(line))
            for line in range(1, lines + 1)
        )

    kept = at_once([partial(record_all, first), partial(record_all, second)])
    assert sum(kept) == lines
    batch = second.batch_by_id("batch_1")
    assert batch is not None and batch.counts == RequestCounts(0, lines // 2, lines // 2)
    assert [r.line for r in first.results("batch_1")] == list(range(1, lines + 1))


def test_results_come_in_line_order_a_page_at_a_time(backend: Backend) -> None:
    store = backend.open_another(page_lines=3)
    store.add_batch(a_batch("batch_1"))
    order = [9, 1, 12, 4, 2, 7, 3]
    store.record_many("batch_1", [ok(line) for line in order])
    assert [r.line for r in store.results("batch_1")] == sorted(order)
    reading = store.results("batch_1")
    assert next(reading) == ok(1)  # the first page (1, 2, 3) is read, no more
    store.record("batch_1", ok(5))  # past the first page: the next page's read finds it
    store.record("batch_1", ok(100))
    assert [r.line for r in reading] == [2, 3, 4, 5, 7, 9, 12, 100]
    assert list(store.results("batch_2")) == []


def test_results_of_a_batch_larger_than_a_page_are_all_read(store: SqlBatchStore) -> None:
    store.add_batch(a_batch("batch_1"))
    line_bytes = b"x" * 512
    store.record_many("batch_1", [ok(n, line_bytes) for n in range(1, 2502)])
    assert [(r.line, r.data) for r in store.results("batch_1")] == [
        (n, line_bytes) for n in range(1, 2502)
    ]


# tenants ---------------------------------------------------------------------------


def test_deleting_a_tenant_removes_its_rows_and_returns_digests_nobody_names(
    store: SqlBatchStore, backend: Backend
) -> None:
    store.add_file(a_file("file-ax", ACME, sha256=DIGEST_X))  # both upload the same bytes
    store.add_file(a_file("file-ax2", ACME, sha256=DIGEST_X))
    store.add_file(a_file("file-ay", ACME, sha256=DIGEST_Y))
    store.add_file(a_file("file-gx", GLOBEX, sha256=DIGEST_X))
    store.add_file(a_file("file-gz", GLOBEX, sha256=DIGEST_Z))
    for tenant in (ACME, GLOBEX):
        store.add_batch(a_batch(f"batch_{name_of(tenant)}", tenant))
        store.record_many(f"batch_{name_of(tenant)}", [ok(1), failed(2)])
    globex_batch = store.batch(GLOBEX, "batch_globex")

    assert store.delete_tenant(ACME) == [DIGEST_Y]

    assert store.files(ACME) == [] and store.batches(ACME) == []
    assert store.batch_by_id("batch_acme") is None
    assert list(store.results("batch_acme")) == []
    assert backend.sql("SELECT DISTINCT batch_id FROM batch_results") == [("batch_globex",)]
    assert [f.id for f in store.files(GLOBEX, order="asc")] == ["file-gx", "file-gz"]
    assert store.batch(GLOBEX, "batch_globex") == globex_batch
    assert len(list(store.results("batch_globex"))) == 2
    assert store.delete_tenant(ACME) == []
    assert store.delete_tenant(GLOBEX) == [DIGEST_X, DIGEST_Z]


# opening, and a database that cannot be had -----------------------------------------


def test_a_sqlite_file_locked_past_the_timeout_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "batches.sqlite3"
    store = sqlite_batch_store(path, timeout_s=0.2)
    store.add_file(a_file("file-1"))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(BatchStoreUnavailable, match="cannot be used now"):
            store.add_file(a_file("file-2"))
        assert store.file(ACME, "file-1") is not None  # WAL: reads go on meanwhile
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.add_file(a_file("file-2"))
    assert len(store.files(ACME)) == 2


def test_a_postgres_that_is_down_is_unavailable() -> None:
    url = f"postgresql://headway@127.0.0.1:{free_port()}/headway"
    with pytest.raises(BatchStoreUnavailable, match="cannot be used now"):
        postgres_batch_store(url, connect_timeout_s=1)


def test_settings_choose_sqlite_or_postgres(tmp_path: Path, libpq_url: str) -> None:
    settings = Settings(data_dir=tmp_path, postgres_url=None)
    embedded = open_batch_store(settings)
    assert isinstance(embedded, SqlBatchStore) and embedded.database == "sqlite"
    assert settings.batches_path.is_file()
    shared = open_batch_store(Settings(data_dir=tmp_path, postgres_url=libpq_url))
    try:
        assert isinstance(shared, SqlBatchStore) and shared.database == "postgres"
        shared.add_file(a_file("file-1"))
        assert embedded.file(ACME, "file-1") is None
    finally:
        shared.close()


# a tenant's bounds ---------------------------------------------------------------------

BOUNDS = TenantBounds(max_files=3, max_stored_bytes=3 * 1234, max_open_batches=2)


def test_usage_counts_a_tenants_files_bytes_and_unfinished_batches(store: SqlBatchStore) -> None:
    assert store.usage(ACME) == TenantUse(0, 0, 0)
    store.add_file(a_file("file-1"))
    store.add_file(a_file("file-2", purpose="batch_output"))
    store.add_file(a_file("file-3", tenant=OTHER))
    for batch_id, status in (("b1", "validating"), ("b2", "cancelling"), ("b3", "completed")):
        store.add_batch(a_batch(batch_id, status=status))
    store.add_batch(a_batch("b4", tenant=OTHER))
    assert store.usage(ACME) == TenantUse(2, 2 * 1234, 2)
    assert store.usage(OTHER) == TenantUse(1, 1234, 1)


def test_a_file_past_a_tenants_bound_is_not_added_and_another_tenant_is_unaffected(
    store: SqlBatchStore,
) -> None:
    for n in range(3):
        assert store.add_file(a_file(f"file-{n}"), BOUNDS) is None
    assert store.add_file(a_file("file-3"), BOUNDS) == OverLimit("max_files", 3, 3)
    assert store.add_file(a_file("file-x", tenant=OTHER), BOUNDS) is None
    assert [f.id for f in store.files(ACME, order="asc")] == ["file-0", "file-1", "file-2"]
    roomy = TenantBounds(max_files=10, max_stored_bytes=4 * 1234 - 1, max_open_batches=1)
    assert store.add_file(a_file("file-4"), roomy) == OverLimit(
        "max_stored_bytes", 4 * 1234 - 1, 3 * 1234
    )
    assert store.add_file(a_file("file-4")) is None  # a batch's output: no bound


def test_a_batch_past_a_tenants_open_batches_is_not_added(store: SqlBatchStore) -> None:
    assert store.add_batch(a_batch("b1"), 2) is None
    assert store.add_batch(a_batch("b2", status="in_progress"), 2) is None
    assert store.add_batch(a_batch("b3"), 2) == OverLimit("max_open_batches", 2, 2)
    assert store.batch(ACME, "b3") is None
    assert store.add_batch(a_batch("b4", tenant=OTHER), 2) is None
    store.move("b1", ("validating",), "failed", 5)
    assert store.add_batch(a_batch("b3"), 2) is None


def test_of_racers_for_a_tenants_last_slot_exactly_one_wins(backend: Backend) -> None:
    """Eight processes' stores (own connections) add at once for each tenant's one slot
    left; the count and the insert hold the tenant's lock, so exactly one gets it."""
    stores = [backend.open_another() for _ in range(8)]
    for round_ in range(3):
        tenant = 10 + round_
        for n in range(2):
            stores[0].add_file(a_file(f"{tenant}-held-{n}", tenant=tenant))
        files = at_once(
            [
                partial(s.add_file, a_file(f"{tenant}-racer-{i}", tenant=tenant), BOUNDS)
                for i, s in enumerate(stores)
            ]
        )
        assert sum(outcome is None for outcome in files) == 1, files
        assert stores[0].usage(tenant).files == 3
        stores[0].add_batch(a_batch(f"{tenant}-open", tenant=tenant))
        batches = at_once(
            [
                partial(s.add_batch, a_batch(f"{tenant}-b{i}", tenant=tenant), 2)
                for i, s in enumerate(stores)
            ]
        )
        assert sum(outcome is None for outcome in batches) == 1, batches
        assert stores[0].usage(tenant).open_batches == 2
    for s in stores:
        s.close()


# a tenant is its id ------------------------------------------------------------------


def test_a_tenant_of_a_deleted_tenants_name_finds_nothing_of_it(store: SqlBatchStore) -> None:
    """Another id under the same name: none of the first tenant's rows, bounds or deletion."""
    first, second = ACME, 7
    store.add_file(a_file("file-1", first))
    store.add_batch(a_batch("batch_1", first))
    renamed = replace(a_file("file-2", second), tenant="acme")
    store.add_file(renamed)
    assert store.files(second) == [renamed]
    assert store.file(second, "file-1") is None
    assert store.batch(second, "batch_1") is None and store.batches(second) == []
    assert store.delete_file(second, "file-1") is None
    assert store.usage(second) == TenantUse(1, 1234, 0)
    assert store.add_batch(a_batch("batch_2", second), 1) is None  # the first's is not counted
    assert store.delete_tenant(first) == []  # its content is still named by file-2
    assert store.files(second) == [renamed] and [b.id for b in store.batches(second)] == ["batch_2"]


def test_legacy_rows_are_nobodys_until_adopted_by_name(
    store: SqlBatchStore, backend: Backend
) -> None:
    store.add_file(a_file("file-1", ACME))
    store.add_batch(a_batch("batch_1", ACME))
    store.add_file(a_file("file-g", GLOBEX))
    for table in ("batch_files", "batches"):  # as a process of the previous version writes
        backend.sql(f"UPDATE {table} SET tenant_id = 0 WHERE tenant = 'acme'")
    assert store.files(ACME) == [] and store.batch(ACME, "batch_1") is None
    assert store.legacy_tenants() == ["acme"]
    assert store.adopt("globex", 9) == 0  # globex has no legacy rows
    assert store.adopt("acme", 42) == 2
    assert store.legacy_tenants() == []
    assert store.file(42, "file-1") == replace(a_file("file-1"), tenant_id=42)
    assert store.batch(42, "batch_1") == replace(a_batch("batch_1"), tenant_id=42)
    assert store.adopt("acme", 43) == 0  # adopted once: an adopted row is its tenant's
    assert store.file(GLOBEX, "file-g") == a_file("file-g", GLOBEX)
    with pytest.raises(BatchStoreError, match="legacy id 0"):
        store.adopt("acme", 0)
