"""The quality reference store on a SQLite file and on a throw-away Postgres: first
writer wins, and a second store (another gateway) sees what the first stored."""

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from headway.quality.references import (
    QualitySchemaTooNew,
    QualityStoreError,
    QualityStoreUnavailable,
    Reference,
    SqlReferenceStore,
    open_reference_store,
    postgres_reference_store,
    sqlite_reference_store,
)
from headway.settings import Settings
from tests.registry.conftest import postgres_sql, sqlite_sql

VERSION = "cd" * 32


class Backend:
    def __init__(self, request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self._request = request
        if kind == "sqlite":
            path = tmp_path / "quality.sqlite3"
            self._open: Callable[[], SqlReferenceStore] = lambda: sqlite_reference_store(path)
            self.sql: Callable[[str], list] = lambda statement: sqlite_sql(path, statement)
        else:
            url: str = request.getfixturevalue("libpq_url")
            self._open = lambda: postgres_reference_store(url)
            self.sql = lambda statement: postgres_sql(url, statement)

    def open(self) -> SqlReferenceStore:
        store = self._open()
        self._request.addfinalizer(store.close)
        return store


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(request, request.param, tmp_path)


def reference(seed: int, rows: int = 32, dims: int = 8, taken_at: float = 1000.5) -> Reference:
    sample = np.random.default_rng(seed).normal(size=(rows, dims)).astype(np.float32)
    return Reference(VERSION, "embedding", taken_at, sample)


def test_a_saved_reference_loads_back_bit_for_bit(backend):
    store = backend.open()
    assert store.load(VERSION, "embedding") is None
    mine = reference(1)
    kept = store.save_if_absent(mine)
    loaded = store.load(VERSION, "embedding")
    for got in (kept, loaded):
        assert got is not None and got.sample.dtype == np.float32
        assert (got.version, got.kind, got.taken_at, got.rows, got.dims) == (
            VERSION, "embedding", 1000.5, 32, 8,
        )  # fmt: skip
        assert np.array_equal(got.sample, mine.sample)
    assert store.load(VERSION, "rerank") is None  # kinds are apart


def test_the_first_writer_wins_and_a_second_store_sees_it(backend):
    store, another = backend.open(), backend.open()
    first = store.save_if_absent(reference(1, taken_at=1.0))
    second = another.save_if_absent(reference(2, taken_at=2.0))
    assert second.taken_at == 1.0 and np.array_equal(second.sample, first.sample)
    assert another.load(VERSION, "embedding").taken_at == 1.0
    assert backend.sql("SELECT count(*) FROM quality_references") == [(1,)]
    assert backend.sql("SELECT version FROM quality_migrations") == [(1,)]  # migrated once


def test_racing_writers_all_get_the_one_stored(backend):
    stores = [backend.open() for _ in range(4)]
    kept: list[float] = []
    start = threading.Barrier(len(stores))

    def save(index: int) -> None:
        start.wait()
        kept.append(stores[index].save_if_absent(reference(index, taken_at=index)).taken_at)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(kept) == len(stores) and len(set(kept)) == 1


def test_rerank_scores_are_stored_as_one_column(backend):
    store = backend.open()
    scores = np.linspace(0, 1, 16, dtype=np.float32).reshape(-1, 1)
    store.save_if_absent(Reference(VERSION, "rerank", 5.0, scores))
    loaded = store.load(VERSION, "rerank")
    assert loaded is not None and loaded.dims == 1
    assert np.array_equal(loaded.sample, scores)


def test_a_database_migrated_by_newer_code_is_refused(backend):
    backend.open()
    backend.sql("INSERT INTO quality_migrations (version, applied_at) VALUES (99, 0)")
    with pytest.raises(QualitySchemaTooNew, match="99"):
        backend.open()


def test_a_corrupt_sample_is_reported(backend):
    store = backend.open()
    store.save_if_absent(reference(1))
    backend.sql("UPDATE quality_references SET dims = 9")
    with pytest.raises(QualityStoreError, match="bytes"):
        store.load(VERSION, "embedding")


def test_an_unreachable_database_is_unavailable(tmp_path):
    with pytest.raises(QualityStoreUnavailable):
        sqlite_reference_store(tmp_path)  # a directory: no file can be opened there
    with pytest.raises(QualityStoreUnavailable):
        postgres_reference_store("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1)


def test_the_embedded_store_is_a_file_in_the_data_dir(tmp_path):
    store = open_reference_store(Settings(data_dir=tmp_path))
    store.save_if_absent(reference(1))
    store.close()
    assert (tmp_path / "quality.sqlite3").exists()
    assert sqlite_reference_store(tmp_path / "quality.sqlite3").load(VERSION, "embedding")
