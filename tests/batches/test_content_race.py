"""A content's bytes and the records naming it, on SQLite and on Postgres: a re-upload of
the same bytes racing the delete of the last record's bytes never leaves a record whose
bytes are gone, and every commit a client is answered on is durable when it returns.

The two sides run in two threads on two stores (two processes' worth); a dialect between
a store and its database says when a side asks for its transaction, so each test puts one
side's step exactly where the race used to bite, whatever the scheduler does.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from headway.batches.filestore import DirectoryFileStore, FileWriter
from headway.batches.model import OverLimit, TenantBounds
from headway.batches.open import postgres_batch_store, sqlite_batch_store
from headway.batches.sql import SqlBatchStore
from headway.storage.dialect import Dialect, DialectName, Tx
from headway.storage.postgres import PostgresDialect
from tests.batches.conftest import Backend
from tests.batches.test_contract import ACME, a_file

CONTENT = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n'
DIGEST = hashlib.sha256(CONTENT).hexdigest()
SYNC_OFF = "-csynchronous_commit%3Doff"
"""A libpq ``options`` entry: the session's commits return before their WAL is flushed."""
WAIT_S = 10.0
"""Longest a side waits for the other to reach its step (only a failing run waits)."""


class Hooked:
    """A dialect that calls ``asked()`` each time a transaction is asked for, before it
    takes any lock, and keeps the write transaction open now in ``tx``."""

    def __init__(self, inner: Dialect) -> None:
        self._inner = inner
        self.asked: Callable[[], None] = lambda: None
        self.tx: Tx | None = None

    @property
    def name(self) -> DialectName:  # type: ignore[override]
        return self._inner.name

    @contextmanager
    def read(self) -> Iterator[Tx]:
        self.asked()
        with self._inner.read() as tx:
            yield tx

    @contextmanager
    def write(self, *, lock: bool = True) -> Iterator[Tx]:
        self.asked()
        with self._inner.write(lock=lock) as tx:
            self.tx = tx
            try:
                yield tx
            finally:
                self.tx = None

    def close(self) -> None:
        self._inner.close()


def hooked_store(backend: Backend) -> tuple[SqlBatchStore, Hooked]:
    dialect = Hooked(backend.open_dialect())
    return SqlBatchStore(dialect), dialect


def written(files: DirectoryFileStore, data: bytes = CONTENT) -> FileWriter:
    writer = files.writer()
    writer.write(data)
    return writer


@pytest.fixture
def files(tmp_path: Path) -> DirectoryFileStore:
    return DirectoryFileStore(tmp_path / "files")


def stored_once_then_unnamed(store: SqlBatchStore, files: DirectoryFileStore) -> None:
    """The content was uploaded and its only record deleted (expired): its bytes are still
    there, for the reaper to release, or a re-upload to reuse."""
    store.add_file(a_file("file-old", sha256=DIGEST), place=written(files).place)
    assert store.delete_file_by_id("file-old") is not None
    assert files.read(DIGEST) == CONTENT


def test_a_reupload_asking_while_the_reaper_deletes_places_its_own_bytes(
    backend: Backend, files: DirectoryFileStore
) -> None:
    reaper = backend.open_another()
    uploader, uploader_db = hooked_store(backend)
    stored_once_then_unnamed(reaper, files)
    upload = written(files)
    assert upload.seal() == DIGEST
    asked = threading.Event()
    uploader_db.asked = asked.set
    uploading: list[Future[OverLimit | None]] = []

    with ThreadPoolExecutor(1) as thread:

        def delete_once_the_upload_asked(digest: str) -> None:
            uploading.append(
                thread.submit(
                    uploader.add_file, a_file("file-new", sha256=DIGEST), place=upload.place
                )
            )
            # The re-upload has asked for its transaction: the old code had reused the
            # stored copy by now (dropping its own) and committed its record meanwhile.
            assert asked.wait(WAIT_S)
            files.delete(digest)

        assert reaper.release_content(DIGEST, delete_once_the_upload_asked) is True
        assert uploading[0].result(WAIT_S) is None

    assert reaper.file(ACME, "file-new") is not None
    assert files.read(DIGEST) == CONTENT  # the re-upload put its own copy


def test_a_reaper_asking_while_a_reupload_reuses_the_bytes_deletes_nothing(
    backend: Backend, files: DirectoryFileStore
) -> None:
    uploader = backend.open_another()
    reaper, reaper_db = hooked_store(backend)
    stored_once_then_unnamed(uploader, files)
    stored = files.path_of(DIGEST).stat().st_ino
    upload = written(files)
    upload.seal()
    asked = threading.Event()
    reaper_db.asked = asked.set
    releasing: list[Future[bool]] = []

    with ThreadPoolExecutor(1) as thread:

        def place_once_the_reaper_asked() -> None:
            releasing.append(thread.submit(reaper.release_content, DIGEST, files.delete))
            assert asked.wait(WAIT_S)
            upload.place()  # the stored copy is reused: this upload's own is dropped

        assert (
            uploader.add_file(a_file("file-new", sha256=DIGEST), place=place_once_the_reaper_asked)
            is None
        )
        assert releasing[0].result(WAIT_S) is False

    assert files.read(DIGEST) == CONTENT
    assert files.path_of(DIGEST).stat().st_ino == stored


def test_content_is_released_only_once_no_record_names_it(
    store: SqlBatchStore, files: DirectoryFileStore
) -> None:
    store.add_file(a_file("file-a", sha256=DIGEST), place=written(files).place)
    store.add_file(a_file("file-b", sha256=DIGEST), place=written(files).place)
    deleted: list[str] = []
    store.delete_file_by_id("file-a")
    assert store.release_content(DIGEST, deleted.append) is False and deleted == []
    store.delete_file_by_id("file-b")
    assert store.release_content(DIGEST, deleted.append) is True and deleted == [DIGEST]


def test_a_record_refused_by_a_bound_places_nothing(
    store: SqlBatchStore, files: DirectoryFileStore
) -> None:
    bounds = TenantBounds(max_files=1, max_stored_bytes=10**9, max_open_batches=10)
    store.add_file(a_file("file-a", sha256="a" * 64), bounds)
    upload = written(files)
    upload.seal()
    over = store.add_file(a_file("file-b", sha256=DIGEST), bounds, place=upload.place)
    assert over == OverLimit("max_files", 1, 1)
    upload.discard()
    assert not files.exists(DIGEST) and store.file(ACME, "file-b") is None


def test_a_record_whose_bytes_cannot_be_placed_is_not_committed(
    store: SqlBatchStore, files: DirectoryFileStore
) -> None:
    def disk_failed() -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output"):
        store.add_file(a_file("file-a", sha256=DIGEST), place=disk_failed)
    assert store.file(ACME, "file-a") is None


def test_every_write_commits_durably(backend: Backend, tmp_path: Path) -> None:
    """As ``open.py`` opens the store. SQLite: ``synchronous=FULL`` (2) on the connection.
    Postgres: a session whose ``synchronous_commit`` is ``off`` (here from the URL, as a
    role's or server's default would be) commits the store's writes at ``local``."""
    if backend.kind == "sqlite":
        store = sqlite_batch_store(tmp_path / "durable.sqlite3")
        check, wanted = "PRAGMA synchronous", 2
    else:
        dialect = backend.open_dialect()
        assert isinstance(dialect, PostgresDialect)
        store = postgres_batch_store(dialect.url.replace("options=", f"options={SYNC_OFF}%20"))
        check, wanted = "SHOW synchronous_commit", "local"
    db = Hooked(store._dialect)  # between the store as opened and its database
    store._dialect = db
    seen: list[object] = []

    def look() -> None:
        assert db.tx is not None
        row = db.tx.one(check)
        assert row is not None
        seen.append(row[0])

    try:
        if backend.kind == "postgres":
            with db.read() as tx:
                assert tx.one("SHOW synchronous_commit") == ("off",)  # the session's default
        store.add_file(a_file("file-a", sha256=DIGEST), place=look)
    finally:
        store.close()
    assert seen == [wanted]
