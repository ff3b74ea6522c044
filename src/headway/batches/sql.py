"""The batch store's one implementation of ``BatchStore``, on the storage layer's ``Dialect``.

Each call is one transaction; writes use ``write(lock=False)`` (not the registry's lock).
Races are settled by single statements and locks, never by a read then a write. On SQLite
every write holds the file's write lock (``BEGIN IMMEDIATE``); on Postgres (READ COMMITTED):

- ``move`` is one ``UPDATE … WHERE id = ? AND status IN (…) RETURNING``: a second mover
  waits for the row lock, then the WHERE, checked again, matches nothing.
- ``record`` inserts ``ON CONFLICT (batch_id, line) DO NOTHING RETURNING`` and adds only
  the lines returned to the batch's counts, in the same transaction; no batch row rolls
  the inserts back (``UnknownBatch``). Lines go in sorted, the batch's row locked last.
- A tenant's bounds (``add_file``, ``add_batch``) are counted and the row inserted under
  the tenant's advisory lock (``TENANT_LOCK_CLASS``, the id mod 2^31: ids that agree only
  serialize each other).
- A content's bytes are placed (``add_file``'s ``place``, before the commit) and released
  (``release_content``) under the content's advisory lock (``CONTENT_LOCK_CLASS``, the
  digest's crc32), so a reaper's delete and a re-upload's reuse never interleave.
- ``delete_tenant`` deletes the batches before their results: a ``record`` that locked a
  batch first commits first; one after finds no batch.

Every commit is durable when it returns: the SQLite file is ``synchronous=FULL``
(``open.py``), and on Postgres a session's ``synchronous_commit = off`` is raised to
``local`` for the transaction (off, a crash may lose a commit already answered).
``StorageUnavailable`` becomes ``BatchStoreUnavailable``, any other refusal
``BatchStoreError``.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from headway.batches.migrations import migrate
from headway.batches.model import (
    LEGACY_TENANT_ID,
    RUNNING,
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
from headway.batches.store import BatchStoreError, BatchStoreUnavailable, UnknownBatch
from headway.storage.dialect import Dialect, DialectName, Row, Tx
from headway.storage.errors import StorageError, StorageUnavailable

FILE_COLUMNS = (
    "id, tenant_id, tenant, purpose, filename, bytes, sha256, created_at, expires_at, lines"
)
_STAMPS = tuple(TIMESTAMP_OF.values())
BATCH_COLUMNS = ", ".join(
    (
        "id, tenant_id, tenant, key_id, endpoint, input_file_id, completion_window, status",
        "created_at, expires_at, metadata, errors, total, completed, failed",
        "output_file_id, error_file_id",
        *_STAMPS,
        "traceparent",
    )
)
_LOCKS = 2**31
"""Postgres's two-key advisory lock takes int4 keys: a tenant's id is reduced mod this."""
_IN_CHUNK = 500
"""Most values in one ``IN (…)`` list (SQLite's parameter limit is far above)."""
_INSERT_CHUNK = 200
"""Most result rows in one multi-row ``INSERT`` (four parameters each)."""
_BEFORE_ALL_LINES = -(2**63)
TENANT_LOCK_CLASS = 0x6877_4254  # "hwBT": the first key of a tenant's advisory lock
CONTENT_LOCK_CLASS = 0x6877_4243  # "hwBC": the first key of a content's (a digest's) lock
_OPEN = ", ".join(f"'{status}'" for status in RUNNING)
"""The statuses of a batch not yet final, as SQL."""

T = TypeVar("T")


@contextmanager
def batch_store_errors() -> Iterator[None]:
    """Translate the dialect's errors into the batch store's."""
    try:
        yield
    except StorageUnavailable as exc:
        raise BatchStoreUnavailable(
            f"the batch store's database cannot be used now (retry later): {exc}"
        ) from exc
    except StorageError as exc:
        raise BatchStoreError(f"the batch store's database refused the call: {exc}") from exc


class SqlBatchStore:
    def __init__(
        self,
        dialect: Dialect,
        *,
        clock: Callable[[], float] = time.time,
        page_lines: int = 1000,
    ) -> None:
        """Apply the missing migrations (``BatchSchemaTooNew`` on a newer database).
        ``results`` reads ``page_lines`` results a transaction."""
        self._dialect = dialect
        self._page_lines = page_lines
        try:
            with self._write() as tx:
                migrate(tx, dialect.name, clock)
        except BaseException:
            dialect.close()  # nobody else will: the store was never returned
            raise

    @property
    def database(self) -> DialectName:
        """Which database it is on: ``sqlite`` or ``postgres``."""
        return self._dialect.name

    # files -------------------------------------------------------------------------

    def add_file(
        self,
        file: FileObject,
        bounds: TenantBounds | None = None,
        *,
        place: Callable[[], None] | None = None,
    ) -> OverLimit | None:
        with self._write() as tx:
            if bounds is not None:
                self._lock_tenant(tx, file.tenant_id)
                row = tx.one(
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM batch_files WHERE tenant_id = ?",
                    (file.tenant_id,),
                )
                files, stored = (int(value) for value in row) if row else (0, 0)
                if files + 1 > bounds.max_files:
                    return OverLimit("max_files", bounds.max_files, files)
                if stored + file.bytes > bounds.max_stored_bytes:
                    return OverLimit("max_stored_bytes", bounds.max_stored_bytes, stored)
            if place is not None:
                self._lock_content(tx, file.sha256)
                place()  # the bytes durable in place before the record can commit
            tx.execute(
                f"INSERT INTO batch_files ({FILE_COLUMNS}) VALUES ({_marks(10)})"
                " ON CONFLICT (id) DO NOTHING",
                _file_row(file),
            )
        return None

    def usage(self, tenant_id: int) -> TenantUse:
        with self._read() as tx:
            row = tx.one(
                "SELECT (SELECT COUNT(*) FROM batch_files WHERE tenant_id = ?),"
                " (SELECT COALESCE(SUM(bytes), 0) FROM batch_files WHERE tenant_id = ?),"
                f" (SELECT COUNT(*) FROM batches WHERE tenant_id = ? AND status IN ({_OPEN}))",
                (tenant_id, tenant_id, tenant_id),
            )
        files, stored, open_batches = (int(value) for value in row) if row else (0, 0, 0)
        return TenantUse(files, stored, open_batches)

    def file(self, tenant_id: int, file_id: str) -> FileObject | None:
        with self._read() as tx:
            row = tx.one(
                f"SELECT {FILE_COLUMNS} FROM batch_files WHERE tenant_id = ? AND id = ?",
                (tenant_id, file_id),
            )
        return None if row is None else _file_of(row)

    def files(
        self,
        tenant_id: int,
        *,
        purpose: str | None = None,
        limit: int = 10000,
        after: str | None = None,
        order: Literal["asc", "desc"] = "desc",
    ) -> list[FileObject]:
        sql = f"SELECT {FILE_COLUMNS} FROM batch_files WHERE tenant_id = ?"
        params: list[Any] = [tenant_id]
        if purpose is not None:
            sql += " AND purpose = ?"
            params.append(purpose)
        if after is not None:
            past = "<" if order == "desc" else ">"
            sql += (
                f" AND (created_at, id) {past}"
                " (SELECT created_at, id FROM batch_files WHERE tenant_id = ? AND id = ?)"
            )
            params += [tenant_id, after]
        direction = "DESC" if order == "desc" else "ASC"
        sql += f" ORDER BY created_at {direction}, id {direction} LIMIT ?"
        with self._read() as tx:
            rows = tx.all(sql, (*params, limit))
        return [_file_of(row) for row in rows]

    def delete_file(self, tenant_id: int, file_id: str) -> FileObject | None:
        with self._write() as tx:
            row = tx.one(
                f"DELETE FROM batch_files WHERE tenant_id = ? AND id = ? RETURNING {FILE_COLUMNS}",
                (tenant_id, file_id),
            )
        return None if row is None else _file_of(row)

    def expired_files(self, now: int, limit: int = 1000) -> list[FileObject]:
        with self._read() as tx:
            rows = tx.all(
                f"SELECT {FILE_COLUMNS} FROM batch_files"
                " WHERE expires_at IS NOT NULL AND expires_at <= ?"
                " ORDER BY expires_at, id LIMIT ?",
                (now, limit),
            )
        return [_file_of(row) for row in rows]

    def delete_file_by_id(self, file_id: str) -> FileObject | None:
        with self._write() as tx:
            row = tx.one(
                f"DELETE FROM batch_files WHERE id = ? RETURNING {FILE_COLUMNS}", (file_id,)
            )
        return None if row is None else _file_of(row)

    def release_content(self, sha256: str, delete: Callable[[str], None]) -> bool:
        with self._write() as tx:
            self._lock_content(tx, sha256)
            if tx.one("SELECT 1 FROM batch_files WHERE sha256 = ? LIMIT 1", (sha256,)) is not None:
                return False
            delete(sha256)  # still holding the lock: no record can name it meanwhile
        return True

    def digest_in_use(self, sha256: str) -> bool:
        with self._read() as tx:
            return (
                tx.one("SELECT 1 FROM batch_files WHERE sha256 = ? LIMIT 1", (sha256,)) is not None
            )

    # batches -----------------------------------------------------------------------

    def add_batch(self, batch: Batch, max_open: int | None = None) -> OverLimit | None:
        marks = _marks(len(BATCH_COLUMNS.split(",")))
        with self._write() as tx:
            if max_open is not None:
                self._lock_tenant(tx, batch.tenant_id)
                row = tx.one(
                    f"SELECT COUNT(*) FROM batches WHERE tenant_id = ? AND status IN ({_OPEN})",
                    (batch.tenant_id,),
                )
                open_now = int(row[0]) if row else 0
                if open_now + 1 > max_open:
                    return OverLimit("max_open_batches", max_open, open_now)
            added = tx.one(
                f"INSERT INTO batches ({BATCH_COLUMNS}) VALUES ({marks})"
                " ON CONFLICT (id) DO NOTHING RETURNING id",
                _batch_row(tx, batch),
            )
            if added is None:
                raise BatchStoreError(f"a batch with the id {batch.id} exists already")
        return None

    def batch(self, tenant_id: int, batch_id: str) -> Batch | None:
        with self._read() as tx:
            row = tx.one(
                f"SELECT {BATCH_COLUMNS} FROM batches WHERE tenant_id = ? AND id = ?",
                (tenant_id, batch_id),
            )
            return None if row is None else _batch_of(tx, row)

    def batch_by_id(self, batch_id: str) -> Batch | None:
        with self._read() as tx:
            row = tx.one(f"SELECT {BATCH_COLUMNS} FROM batches WHERE id = ?", (batch_id,))
            return None if row is None else _batch_of(tx, row)

    def batches(self, tenant_id: int, *, limit: int = 20, after: str | None = None) -> list[Batch]:
        sql = f"SELECT {BATCH_COLUMNS} FROM batches WHERE tenant_id = ?"
        params: list[Any] = [tenant_id]
        if after is not None:
            sql += (
                " AND (created_at, id) <"
                " (SELECT created_at, id FROM batches WHERE tenant_id = ? AND id = ?)"
            )
            params += [tenant_id, after]
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        with self._read() as tx:
            return [_batch_of(tx, row) for row in tx.all(sql, (*params, limit))]

    def batches_in(
        self,
        statuses: Collection[BatchStatus],
        limit: int = 100,
        after: tuple[int, str] | None = None,
    ) -> list[Batch]:
        wanted = sorted(set(statuses))
        if not wanted:
            return []
        past = ""
        params: tuple[object, ...] = ()
        if after is not None:
            at, batch_id = after
            past = " AND (created_at > ? OR (created_at = ? AND id > ?))"
            params = (at, at, batch_id)
        with self._read() as tx:
            rows = tx.all(
                f"SELECT {BATCH_COLUMNS} FROM batches WHERE status IN ({_marks(len(wanted))})"
                f"{past} ORDER BY created_at, id LIMIT ?",
                (*wanted, *params, limit),
            )
            return [_batch_of(tx, row) for row in rows]

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
        allowed = sorted(set(from_))
        if not allowed:
            return None
        with self._write() as tx:
            changes: dict[str, Any] = {"status": to}
            stamp = TIMESTAMP_OF.get(to)  # "validating" has none
            if stamp is not None:
                changes[stamp] = at
            if total is not None:
                changes["total"] = total
            if errors is not None:
                changes["errors"] = tx.json([_error_json(error) for error in errors])
            if output_file_id is not None:
                changes["output_file_id"] = output_file_id
            if error_file_id is not None:
                changes["error_file_id"] = error_file_id
            row = tx.one(
                f"UPDATE batches SET {', '.join(f'{column} = ?' for column in changes)}"
                f" WHERE id = ? AND status IN ({_marks(len(allowed))}) RETURNING {BATCH_COLUMNS}",
                (*changes.values(), batch_id, *allowed),
            )
            return None if row is None else _batch_of(tx, row)

    # line results ------------------------------------------------------------------

    def record(self, batch_id: str, result: LineResult) -> bool:
        return self.record_many(batch_id, (result,)) == 1

    def record_many(self, batch_id: str, results: Sequence[LineResult]) -> int:
        first: dict[int, LineResult] = {}
        for result in results:
            first.setdefault(result.line, result)
        ordered = [first[line] for line in sorted(first)]
        new_ok = new_failed = 0
        with self._write() as tx:
            for chunk in _chunks(ordered, _INSERT_CHUNK):
                inserted = tx.all(
                    "INSERT INTO batch_results (batch_id, line, ok, data) VALUES "
                    + ", ".join(["(?, ?, ?, ?)"] * len(chunk))
                    + " ON CONFLICT (batch_id, line) DO NOTHING RETURNING ok",
                    [value for r in chunk for value in (batch_id, r.line, r.ok, r.data)],
                )
                ok = sum(1 for (was_ok,) in inserted if was_ok)
                new_ok += ok
                new_failed += len(inserted) - ok
            counted = tx.one(
                "UPDATE batches SET completed = completed + ?, failed = failed + ?"
                " WHERE id = ? RETURNING id",
                (new_ok, new_failed, batch_id),
            )
            if counted is None:
                raise UnknownBatch(f"no batch has the id {batch_id}: its results were not kept")
        return new_ok + new_failed

    def results(self, batch_id: str) -> Iterator[LineResult]:
        last = _BEFORE_ALL_LINES
        while True:
            with self._read() as tx:
                rows = tx.all(
                    "SELECT line, ok, data FROM batch_results WHERE batch_id = ? AND line > ?"
                    " ORDER BY line LIMIT ?",
                    (batch_id, last, self._page_lines),
                )
            for line, ok, data in rows:
                yield LineResult(line, bool(ok), bytes(data))
            if len(rows) < self._page_lines:
                return
            last = rows[-1][0]

    def recorded(self, batch_id: str, lines: Collection[int]) -> set[int]:
        found: set[int] = set()
        with self._read() as tx:
            for chunk in _chunks(sorted(set(lines)), _IN_CHUNK):
                found.update(
                    line
                    for (line,) in tx.all(
                        "SELECT line FROM batch_results"
                        f" WHERE batch_id = ? AND line IN ({_marks(len(chunk))})",
                        (batch_id, *chunk),
                    )
                )
        return found

    # tenants -----------------------------------------------------------------------

    def delete_tenant(self, tenant_id: int) -> list[str]:
        with self._write() as tx:
            batch_ids = [
                batch_id
                for (batch_id,) in tx.all(
                    "DELETE FROM batches WHERE tenant_id = ? RETURNING id", (tenant_id,)
                )
            ]
            for chunk in _chunks(batch_ids, _IN_CHUNK):
                tx.execute(
                    f"DELETE FROM batch_results WHERE batch_id IN ({_marks(len(chunk))})", chunk
                )
            digests = sorted(
                {
                    digest
                    for (digest,) in tx.all(
                        "DELETE FROM batch_files WHERE tenant_id = ? RETURNING sha256",
                        (tenant_id,),
                    )
                }
            )
            still_named: set[str] = set()
            for chunk in _chunks(digests, _IN_CHUNK):
                still_named.update(
                    digest
                    for (digest,) in tx.all(
                        "SELECT DISTINCT sha256 FROM batch_files"
                        f" WHERE sha256 IN ({_marks(len(chunk))})",
                        chunk,
                    )
                )
        return [digest for digest in digests if digest not in still_named]

    def legacy_tenants(self) -> list[str]:
        with self._read() as tx:
            rows = tx.all(
                "SELECT tenant FROM batch_files WHERE tenant_id = ?"
                " UNION SELECT tenant FROM batches WHERE tenant_id = ?",
                (LEGACY_TENANT_ID, LEGACY_TENANT_ID),
            )
        return sorted(tenant for (tenant,) in rows)

    def adopt(self, tenant: str, tenant_id: int) -> int:
        if tenant_id == LEGACY_TENANT_ID:
            raise BatchStoreError("rows cannot be adopted by the legacy id 0")
        adopted = 0
        with self._write() as tx:
            for table in ("batch_files", "batches"):
                adopted += len(
                    tx.all(
                        f"UPDATE {table} SET tenant_id = ? WHERE tenant_id = ? AND tenant = ?"
                        " RETURNING id",
                        (tenant_id, LEGACY_TENANT_ID, tenant),
                    )
                )
        return adopted

    def close(self) -> None:
        self._dialect.close()

    # transactions ------------------------------------------------------------------

    def _lock_tenant(self, tx: Tx, tenant_id: int) -> None:
        """Hold the tenant's lock until ``tx`` ends (SQLite: its write lock is held already)."""
        if self._dialect.name == "postgres":
            tx.execute(
                "SELECT pg_advisory_xact_lock(CAST(? AS integer), CAST(? AS integer))",
                (TENANT_LOCK_CLASS, tenant_id % _LOCKS),
            )

    def _lock_content(self, tx: Tx, sha256: str) -> None:
        """Hold the content's lock until ``tx`` ends (SQLite: its write lock is held already)."""
        if self._dialect.name == "postgres":
            tx.execute(
                "SELECT pg_advisory_xact_lock(CAST(? AS integer), CAST(? AS integer))",
                (CONTENT_LOCK_CLASS, zlib.crc32(sha256.encode()) % _LOCKS),
            )

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        with batch_store_errors(), self._dialect.read() as tx:
            yield tx

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with batch_store_errors(), self._dialect.write(lock=False) as tx:
            if self._dialect.name == "postgres":
                # A client is answered once this commits: flushed first, whatever the
                # server's or role's default (only ``off`` returns before the flush).
                tx.execute(
                    "SELECT set_config('synchronous_commit', 'local', true)"
                    " WHERE current_setting('synchronous_commit') = 'off'"
                )
            yield tx


# rows <-> values ---------------------------------------------------------------------


def _file_row(file: FileObject) -> tuple[Any, ...]:
    return (
        file.id,
        file.tenant_id,
        file.tenant,
        file.purpose,
        file.filename,
        file.bytes,
        file.sha256,
        file.created_at,
        file.expires_at,
        file.lines,
    )


def _file_of(row: Row) -> FileObject:
    id_, tenant_id, tenant, purpose, filename, size, sha256, created_at, expires_at, lines = row
    return FileObject(
        id_, tenant_id, tenant, purpose, filename, size, sha256, created_at, expires_at, lines
    )


def _error_json(error: LineError) -> dict[str, Any]:
    return {"line": error.line, "code": error.code, "message": error.message, "param": error.param}


def _batch_row(tx: Tx, batch: Batch) -> tuple[Any, ...]:
    return (
        batch.id,
        batch.tenant_id,
        batch.tenant,
        batch.key_id,
        batch.endpoint,
        batch.input_file_id,
        batch.completion_window,
        batch.status,
        batch.created_at,
        batch.expires_at,
        tx.json(dict(batch.metadata)),
        tx.json([_error_json(error) for error in batch.errors]),
        batch.counts.total,
        batch.counts.completed,
        batch.counts.failed,
        batch.output_file_id,
        batch.error_file_id,
        *(getattr(batch, stamp) for stamp in _STAMPS),
        batch.traceparent,
    )


def _batch_of(tx: Tx, row: Row) -> Batch:
    (id_, tenant_id, tenant, key_id, endpoint, input_file_id, window, status) = row[:8]
    created_at, expires_at = row[8:10]
    metadata, errors, total, completed, failed, output_file_id, error_file_id = row[10:17]
    return Batch(
        id_,
        tenant_id,
        tenant,
        key_id,
        endpoint,
        input_file_id,
        window,
        status,
        created_at,
        expires_at,
        metadata=tx.parsed(metadata),
        counts=RequestCounts(total, completed, failed),
        errors=tuple(LineError(**error) for error in tx.parsed(errors)),
        output_file_id=output_file_id,
        error_file_id=error_file_id,
        **dict(zip(_STAMPS, row[17:-1], strict=True)),
        traceparent=row[-1],
    )


def _marks(count: int) -> str:
    return ", ".join(["?"] * count)


def _chunks(values: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]
