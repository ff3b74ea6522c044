"""The content-addressed file store on a directory: durable puts, validated digests."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from headway.batches.filestore import DirectoryFileStore, FileMissing, FileStore, InvalidDigest

pytestmark = pytest.mark.unit

CONTENT = b'{"custom_id": "a", "body": {"input": "hello"}}\n'
DIGEST = hashlib.sha256(CONTENT).hexdigest()


def leftovers(root: Path) -> list[Path]:
    """Every file under ``root`` that is not a stored content (a temporary one)."""
    return [p for p in root.rglob("*") if p.is_file() and p.name.startswith(".")]


def test_put_stores_the_content_under_its_digest(tmp_path: Path) -> None:
    files: FileStore = DirectoryFileStore(tmp_path)
    assert files.put(CONTENT) == DIGEST
    assert files.read(DIGEST) == CONTENT
    assert files.exists(DIGEST)
    assert (tmp_path / DIGEST[:2] / DIGEST[2:4] / DIGEST).read_bytes() == CONTENT
    assert leftovers(tmp_path) == []


def test_an_absent_digest_is_missing(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    assert not files.exists(DIGEST)
    with pytest.raises(FileMissing, match=DIGEST) as missing:
        files.read(DIGEST)
    assert isinstance(missing.value, KeyError)


def test_a_range_reads_those_bytes_only(tmp_path: Path) -> None:
    files: FileStore = DirectoryFileStore(tmp_path)
    files.put(CONTENT)
    assert files.read_range(DIGEST, 2, 11) == CONTENT[2:11] == b"custom_id"
    assert files.read_range(DIGEST, len(CONTENT) - 1, len(CONTENT) + 50) == b"\n"
    assert files.read_range(DIGEST, 5, 5) == b""
    with pytest.raises(FileMissing):
        files.read_range(hashlib.sha256(b"other").hexdigest(), 0, 4)


def test_delete_removes_the_content_and_an_absent_one_is_fine(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    files.put(CONTENT)
    other = files.put(b"other")
    files.delete(DIGEST)
    assert not files.exists(DIGEST)
    with pytest.raises(FileMissing):
        files.read(DIGEST)
    files.delete(DIGEST)
    assert files.read(other) == b"other"


def test_putting_stored_content_again_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = DirectoryFileStore(tmp_path)
    files.put(CONTENT)
    before = (tmp_path / DIGEST[:2] / DIGEST[2:4] / DIGEST).stat()

    def no_write(*args: object) -> None:
        raise AssertionError("a second put of stored content wrote it again")

    monkeypatch.setattr(os, "replace", no_write)
    assert files.put(CONTENT) == DIGEST
    after = (tmp_path / DIGEST[:2] / DIGEST[2:4] / DIGEST).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert leftovers(tmp_path) == []


def test_empty_content_is_stored_too(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    assert files.read(files.put(b"")) == b""


@pytest.mark.parametrize(
    "digest",
    [
        "../" * 21 + "x",
        "../../etc/passwd",
        DIGEST.upper(),
        DIGEST[:-1],
        DIGEST + "0",
        DIGEST + "\n",
        "/" + DIGEST[1:],
        "",
    ],
)
def test_a_digest_that_is_not_sha256_hex_is_refused(tmp_path: Path, digest: str) -> None:
    files = DirectoryFileStore(tmp_path / "root")
    for call in (files.read, files.exists, files.delete):
        with pytest.raises(InvalidDigest, match="not a SHA-256 digest"):
            call(digest)
    assert not (tmp_path / "root").exists()


def test_a_failed_put_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = DirectoryFileStore(tmp_path)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        files.put(CONTENT)
    monkeypatch.undo()
    assert not files.exists(DIGEST)
    assert leftovers(tmp_path) == []


CRASH_MID_PUT = """
import os, sys
from pathlib import Path
from headway.batches.filestore import DirectoryFileStore
os.replace = lambda src, dst: os._exit(3)  # killed after the write, before the rename
DirectoryFileStore(Path(sys.argv[1])).put(sys.stdin.buffer.read())
"""


def test_a_process_killed_mid_put_leaves_no_visible_file(tmp_path: Path) -> None:
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_MID_PUT, str(tmp_path)],
        input=CONTENT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == 3, crashed.stderr.decode()
    (temporary,) = leftovers(tmp_path)  # what the crash left: the whole content, unnamed
    assert temporary.read_bytes() == CONTENT
    files = DirectoryFileStore(tmp_path)
    assert not files.exists(DIGEST)
    with pytest.raises(FileMissing):
        files.read(DIGEST)
    assert files.put(CONTENT) == DIGEST  # a retry stores it
    assert files.read(DIGEST) == CONTENT


# Writers: content too large to hold, streamed to a partial file and placed by digest


def test_a_writer_places_what_was_written_under_its_digest(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    for piece in (CONTENT[:5], b"", CONTENT[5:]):
        writer.write(piece)
    assert writer.size == len(CONTENT)
    assert leftovers(tmp_path) != []  # the partial file, while it is written
    assert writer.commit() == DIGEST
    assert files.read(DIGEST) == CONTENT and leftovers(tmp_path) == []
    writer.discard()  # after a commit: nothing
    assert files.read(DIGEST) == CONTENT
    with pytest.raises(ValueError, match="committed or discarded"):
        writer.write(b"more")


def test_a_discarded_writer_leaves_nothing_and_may_be_discarded_twice(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    writer.write(CONTENT)
    writer.discard()
    writer.discard()
    assert not files.exists(DIGEST) and leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="committed or discarded"):
        writer.commit()


def test_a_writer_of_content_stored_already_keeps_the_stored_copy(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    files.put(CONTENT)
    before = files.path_of(DIGEST).stat()
    writer = files.writer()
    writer.write(CONTENT)
    assert writer.commit() == DIGEST
    assert files.path_of(DIGEST).stat().st_ino == before.st_ino
    assert leftovers(tmp_path) == []


def test_a_failed_commit_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    writer.write(CONTENT)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        writer.commit()
    monkeypatch.undo()
    assert not files.exists(DIGEST) and leftovers(tmp_path) == []


def test_a_discard_from_another_thread_waits_for_the_write_in_progress(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    started, errors = threading.Event(), []

    def keep_writing() -> None:
        try:
            while True:
                writer.write(b"x" * (1 << 16))
                started.set()
        except ValueError:  # discarded: the next write is refused, none is torn
            return
        except Exception as exc:  # pragma: no cover - what the test guards against
            errors.append(exc)

    thread = threading.Thread(target=keep_writing)
    thread.start()
    assert started.wait(10)
    writer.discard()
    thread.join(10)
    assert not thread.is_alive() and errors == [] and leftovers(tmp_path) == []


def test_sweep_removes_partial_files_older_than_any_write_in_progress(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    assert files.sweep_partial(3600) == 0  # nothing written yet: no directory
    old = files.writer()  # as a process that died would leave it
    (old_path,) = leftovers(tmp_path)
    fresh = files.writer()
    fresh.write(b"still being written")
    os.utime(old_path, (time.time() - 7200, time.time() - 7200))
    assert files.sweep_partial(3600) == 1
    assert not old_path.exists() and len(leftovers(tmp_path)) == 1
    assert fresh.commit() == hashlib.sha256(b"still being written").hexdigest()
    old.discard()


def test_a_sealed_writer_keeps_its_bytes_aside_until_placed(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    writer.write(CONTENT)
    assert writer.seal() == DIGEST and writer.seal() == DIGEST
    assert not files.exists(DIGEST)  # sealed: fsynced, still the temporary file
    with pytest.raises(ValueError, match="sealed"):
        writer.write(b"more")
    writer.place()
    assert files.read(DIGEST) == CONTENT and leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="committed or discarded"):
        writer.place()


def test_a_sealed_writer_discarded_leaves_nothing(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    writer = files.writer()
    writer.write(CONTENT)
    writer.seal()
    writer.discard()
    assert not files.exists(DIGEST) and leftovers(tmp_path) == []


def test_placing_over_a_stored_copy_of_another_size_replaces_it(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    files.put(CONTENT)
    files.path_of(DIGEST).write_bytes(CONTENT[:10])  # cut short, as on a failing disk
    writer = files.writer()
    writer.write(CONTENT)
    writer.place()
    assert files.read(DIGEST) == CONTENT and leftovers(tmp_path) == []


def test_stored_lists_the_contents_older_than_a_cutoff_and_nothing_else(tmp_path: Path) -> None:
    files = DirectoryFileStore(tmp_path)
    other = b"another content\n"
    files.put(CONTENT)
    files.put(other)
    partial = files.writer()
    partial.write(b"a partial file")  # under .partial: never listed
    past = time.time() - 7200
    os.utime(files.path_of(DIGEST), (past, past))
    assert list(files.stored(3600)) == [DIGEST]
    assert sorted(files.stored(0, now=time.time() + 1)) == sorted(
        [DIGEST, hashlib.sha256(other).hexdigest()]
    )
    assert list(DirectoryFileStore(tmp_path / "never-made").stored(0)) == []
    partial.discard()
