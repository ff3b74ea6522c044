"""Backing up the embedded ledger while the consumer writes; restoring it, and what a
restore refuses (a ledger in use, a newer ledger, a bad backup)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headway.billing.ledger.backup import (
    BackupError,
    LedgerInUse,
    backup,
    ledger_lock,
    restore,
    summarize,
)
from headway.billing.ledger.errors import LedgerUnavailable
from headway.billing.ledger.sqlite import SQLiteLedger
from headway.cli import app
from tests.billing.conftest import DAY0, HOUR, usage_event

BATCH = 40


def request_ids(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[0] for row in db.execute("SELECT request_id FROM processed_requests")}
    finally:
        db.close()


async def write_batches(ledger: SQLiteLedger, first: int, count: int) -> None:
    for b in range(first, first + count):
        events = [
            usage_event(f"b{b}-{i}", DAY0 + (b % 5) * HOUR + i, texts=1 + i % 3)
            for i in range(BATCH)
        ]
        await ledger.apply(events, [])


async def test_backups_taken_while_the_consumer_writes_are_each_one_commit_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = await SQLiteLedger.open(path)
    try:
        await write_batches(ledger, 0, 1)
        writing = asyncio.create_task(write_batches(ledger, 1, 150))
        backups = []
        while not writing.done() or not backups:
            target = tmp_path / "backups" / f"b{len(backups)}.sqlite3"
            backups.append(await asyncio.to_thread(backup, path, target))
        await writing
        counts = [b.processed for b in backups]
        assert len(backups) >= 2 and counts == sorted(counts)  # each later than the last
        assert all(count % BATCH == 0 for count in counts)  # whole batches: commits, no halves
        assert any(0 < count < 151 * BATCH for count in counts)  # taken while it wrote
        final = await asyncio.to_thread(backup, path, tmp_path / "final.sqlite3")
        assert final.processed == 151 * BATCH
        assert await ledger.check_aggregates() == []
    finally:
        await ledger.close()
    assert request_ids(final.path) == request_ids(path)
    assert not list((tmp_path / "backups").glob(".*"))  # no partial file left behind


async def test_restore_refuses_a_newer_ledger_unless_forced_and_keeps_what_it_replaced(
    tmp_path: Path,
) -> None:
    path, keep = tmp_path / "ledger.sqlite3", tmp_path / "backups"
    ledger = await SQLiteLedger.open(path)
    await write_batches(ledger, 0, 3)
    saved = backup(path, tmp_path / "saved.sqlite3")
    await write_batches(ledger, 3, 2)  # written after the backup
    await ledger.close()
    newer = request_ids(path)

    with pytest.raises(BackupError, match="newer than the backup"):
        restore(saved.path, path, keep_dir=keep)
    assert request_ids(path) == newer  # refused: untouched

    restored, kept = restore(saved.path, path, keep_dir=keep, force=True)
    assert restored.processed == 3 * BATCH and request_ids(path) == request_ids(saved.path)
    assert kept is not None and request_ids(kept.path) == newer  # nothing lost
    reopened = await SQLiteLedger.open(path)  # the consumer takes it from here
    try:
        assert (await reopened.counts())["processed"] == 3 * BATCH
        assert await reopened.check_aggregates() == []
        await write_batches(reopened, 10, 1)
    finally:
        await reopened.close()


async def test_restore_waits_for_no_one_it_refuses_a_ledger_in_use(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = await SQLiteLedger.open(path)
    try:
        await write_batches(ledger, 0, 1)
        saved = backup(path, tmp_path / "saved.sqlite3")
        with pytest.raises(LedgerInUse, match="stop it first"):
            restore(saved.path, path, keep_dir=tmp_path, force=True)
    finally:
        await ledger.close()
    with ledger_lock(path, exclusive=True), pytest.raises(LedgerUnavailable, match="restored"):
        await SQLiteLedger.open(path)  # and a consumer cannot open it mid-restore


def test_a_backup_that_is_no_ledger_or_a_newer_ones_is_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database at all" * 100)
    foreign = tmp_path / "foreign.sqlite3"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    for bad, reason in [(garbage, "not a readable"), (foreign, "no headway ledger")]:
        with pytest.raises(BackupError, match=reason):
            restore(bad, tmp_path / "ledger.sqlite3", keep_dir=tmp_path)
    assert not (tmp_path / "ledger.sqlite3").exists()
    with pytest.raises(BackupError, match="no ledger"):
        backup(tmp_path / "missing.sqlite3", tmp_path / "out.sqlite3")


async def test_a_newer_schema_or_tampered_aggregates_fail_the_checks(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = await SQLiteLedger.open(path)
    await write_batches(ledger, 0, 1)
    await ledger.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE hourly_usage SET texts = texts + 1 WHERE rowid = 1")
    db.close()
    with pytest.raises(BackupError, match="aggregates differ"):
        summarize(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE hourly_usage SET texts = texts - 1 WHERE rowid = 1")
    db.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)")
    db.close()
    with pytest.raises(BackupError, match=r"\[99\]"):
        summarize(path)


async def test_the_cli_backs_up_and_restores_the_data_dirs_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = await SQLiteLedger.open(path)
    await write_batches(ledger, 0, 2)
    await ledger.close()
    runner = CliRunner()
    made = runner.invoke(app, ["billing", "backup", "--data-dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    [saved] = (tmp_path / "backups").glob("ledger-*.sqlite3")
    assert f"{2 * BATCH} events" in made.output and str(saved) in made.output
    done = runner.invoke(
        app, ["billing", "restore", str(saved), "--data-dir", str(tmp_path), "--yes"]
    )
    assert done.exit_code == 0, done.output
    assert "replaced is kept in" in done.output and request_ids(path) == request_ids(saved)
    shared = runner.invoke(
        app,
        ["billing", "backup", "--data-dir", str(tmp_path)],
        env={"HEADWAY_POSTGRES_URL": "postgresql://h@127.0.0.1:1/x"},
    )
    assert shared.exit_code == 2 and "pg_dump" in shared.output
