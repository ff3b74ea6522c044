"""Where uploaded and written batch files' bytes live: content-addressed by SHA-256.

A file record (``FileObject``) names its content by digest, and one copy of each content
is kept however many records name it (the batch store says when none does). ``FileStore``
is the seam; ``DirectoryFileStore`` keeps ``root/ab/cd/<digest>`` on a local disk. A digest
is checked (64 lowercase hex) before it becomes a path, so none names a path outside root.

A ``put`` is durable before it returns and never visible half-written: a temporary file in
the digest's directory, fsynced, renamed into place, the directory fsynced. Content too
large to hold goes through a ``writer``: a file in ``root/.partial/``, hashed as written;
``seal`` fsyncs it, ``place`` renames it under its digest (or drops it when a copy of that
size is stored: that entry is fsynced instead), ``discard`` removes it. The batch store
calls ``place`` inside the transaction committing the record, under the content's lock
(``BatchStore.add_file``), so a ``release_content`` cannot fall between reuse and commit.
A process killed mid-write leaves a temporary file no read sees, which ``sweep_partial``
removes once older than any write in progress can be.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from headway.storage.durable import fsync_dir

_DIGEST = re.compile(r"[0-9a-f]{64}")
_DIGEST_PART = re.compile(r"[0-9a-f]{2}")
"""A level of ``root/ab/cd/``: two hex characters of the digest."""
PARTIAL_DIR = ".partial"
"""Under the root: files being written (no digest directory starts with a dot)."""
PARTIAL_FILE_AGE_S = 86400.0
"""A partial file not written for this long belongs to a process that died (``sweep_partial``
at start-up removes it): no upload or output file stalls for a day."""


class FileMissing(KeyError):
    """No content with that digest is stored (never put, or deleted)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "file missing"


class InvalidDigest(ValueError):
    """A digest that is not 64 lowercase hex characters (a SHA-256 hex digest)."""


class FileWriter(Protocol):
    """One file being written: bytes in, then ``commit`` (stored under its digest) or
    ``discard`` (gone). Its calls may come from different threads, one at a time or not:
    each waits for the one in progress."""

    @property
    def size(self) -> int:
        """Bytes written so far."""
        ...

    def write(self, data: bytes) -> None: ...

    def seal(self) -> str:
        """No more writes: the bytes fsynced, still in the temporary file; the content's
        SHA-256 hex digest (the same digest if sealed again)."""
        ...

    def place(self) -> None:
        """Seal, then put the bytes in place under their digest, durable (renamed, the
        directory fsynced; dropped when that content is stored already); the writer is
        closed."""
        ...

    def commit(self) -> str:
        """``seal`` then ``place``: the content's SHA-256 hex digest, stored and durable."""
        ...

    def discard(self) -> None:
        """Remove what was written; after ``place``, or twice, it does nothing."""
        ...


class FileStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store ``data``; its SHA-256 hex digest. Durable before it returns; putting
        content that is stored already changes nothing."""
        ...

    def read(self, digest: str) -> bytes:
        """The content; ``FileMissing`` if none has that digest."""
        ...

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the content (fewer past its end); ``FileMissing``
        if none has that digest."""
        ...

    def exists(self, digest: str) -> bool: ...

    def delete(self, digest: str) -> None:
        """Remove the content; one that is absent already is fine."""
        ...

    def writer(self) -> FileWriter:
        """A new, empty temporary file (``FileWriter``): commit or discard it."""
        ...

    def stored(self, older_than_s: float, now: float | None = None) -> Iterator[str]:
        """The digests of the contents stored, last written more than ``older_than_s``
        ago (those a sweep for unnamed copies may look at), in no particular order."""
        ...

    def path_of(self, digest: str) -> Path:
        """Where the content lies on this machine's disk (a download is sent from it)."""
        ...


def checked_digest(digest: str) -> str:
    """``digest`` if it is a SHA-256 hex digest, else ``InvalidDigest``."""
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise InvalidDigest(f"{digest!r} is not a SHA-256 digest (64 lowercase hex characters)")
    return digest


class DirectoryFileStore:
    """``FileStore`` on a local directory: ``root/ab/cd/<digest>``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.partial_dir = root / PARTIAL_DIR

    def path_of(self, digest: str) -> Path:
        checked = checked_digest(digest)
        return self.root / checked[:2] / checked[2:4] / checked

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_of(digest)
        if _holds(target, len(data)):
            fsync_dir(target.parent)  # as in ``place``: the copy's entry durable too
            return digest
        self._make_dirs(target.parent)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{digest}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        fsync_dir(target.parent)
        return digest

    def read(self, digest: str) -> bytes:
        try:
            return self.path_of(digest).read_bytes()
        except FileNotFoundError:
            raise FileMissing(f"no stored file has the digest {digest}") from None

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        try:
            with self.path_of(digest).open("rb") as stored:
                stored.seek(start)
                return stored.read(max(end - start, 0))
        except FileNotFoundError:
            raise FileMissing(f"no stored file has the digest {digest}") from None

    def exists(self, digest: str) -> bool:
        return self.path_of(digest).is_file()

    def delete(self, digest: str) -> None:
        """Not fsynced: a delete lost to a crash leaves an unreferenced copy, no harm."""
        self.path_of(digest).unlink(missing_ok=True)

    def writer(self) -> PartialFile:
        self._make_dirs(self.partial_dir)
        return PartialFile(self, self.partial_dir)

    def sweep_partial(self, older_than_s: float, now: float | None = None) -> int:
        """Remove partial files last written more than ``older_than_s`` ago (left by a
        process that died mid-write); how many went."""
        cutoff = (time.time() if now is None else now) - older_than_s
        removed = 0
        try:
            entries = list(os.scandir(self.partial_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file() and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
        return removed

    def stored(self, older_than_s: float, now: float | None = None) -> Iterator[str]:
        cutoff = (time.time() if now is None else now) - older_than_s
        for first in _entries(self.root):
            if _DIGEST_PART.fullmatch(first.name) is None:
                continue  # .partial, or anything not put here
            for second in _entries(Path(first.path)):
                if _DIGEST_PART.fullmatch(second.name) is None:
                    continue
                for entry in _entries(Path(second.path)):
                    if _DIGEST.fullmatch(entry.name) is None:
                        continue  # a temporary file of a put in progress
                    with contextlib.suppress(FileNotFoundError):
                        if entry.is_file() and entry.stat().st_mtime < cutoff:
                            yield entry.name

    def place(self, temporary: str, digest: str, size: int) -> None:
        """Rename a durable temporary file of ``size`` bytes into place as ``digest``, the
        new directory entry fsynced. When a copy of that size is stored already the
        temporary file is dropped and the copy's directory fsynced: its writer may not have
        done so yet, and the caller is about to commit a record that names it. A copy of
        another size (cut short on a failing disk) is replaced: these bytes are the
        digest's."""
        target = self.path_of(digest)
        if _holds(target, size):
            os.unlink(temporary)
            fsync_dir(target.parent)
            return
        self._make_dirs(target.parent)
        os.replace(temporary, target)
        fsync_dir(target.parent)

    def _make_dirs(self, directory: Path) -> None:
        """Create ``directory`` and any parents missing, fsyncing each new one's parent
        so the new entries survive a crash with the file put into them."""
        missing = []
        for level in (directory, *directory.parents):
            if level.is_dir():
                break
            missing.append(level)
        for level in reversed(missing):
            level.mkdir(exist_ok=True)
            fsync_dir(level.parent)


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """The directory's entries; none if it is gone (deleted meanwhile, or never made)."""
    try:
        with os.scandir(directory) as found:
            return list(found)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _holds(target: Path, size: int) -> bool:
    """Whether ``target`` is a regular file of ``size`` bytes."""
    try:
        found = target.stat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size == size


class PartialFile:
    """``FileWriter`` on a temporary file in ``directory``, placed by ``store``."""

    def __init__(self, store: DirectoryFileStore, directory: Path) -> None:
        self._store = store
        fd, path = tempfile.mkstemp(dir=directory, prefix=".write.", suffix=".tmp")
        self._path: str | None = path
        """None once placed or discarded: nothing of this writer is left to remove."""
        self._out: BinaryIO = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self._size = 0
        self._digest: str | None = None
        """Set by ``seal``: the bytes are fsynced and no more may be written."""
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._path is None:
                raise ValueError("this file was committed or discarded already")
            if self._digest is not None:
                raise ValueError("this file was sealed: nothing more can be written to it")
            self._out.write(data)
            self._hash.update(data)
            self._size += len(data)

    def seal(self) -> str:
        with self._lock:
            return self._sealed()

    def place(self) -> None:
        with self._lock:
            digest = self._sealed()
            path = self._path
            assert path is not None  # _sealed raised otherwise
            try:
                self._store.place(path, digest, self._size)
            except BaseException:
                self._remove()
                raise
            self._path = None

    def commit(self) -> str:
        self.place()
        digest = self._digest
        assert digest is not None  # place sealed it
        return digest

    def discard(self) -> None:
        with self._lock:
            self._remove()

    def _sealed(self) -> str:
        """The digest, sealing first if need be (the lock held)."""
        if self._path is None:
            raise ValueError("this file was committed or discarded already")
        if self._digest is None:
            try:
                self._out.flush()
                os.fsync(self._out.fileno())
                self._out.close()
            except BaseException:
                self._remove()
                raise
            self._digest = self._hash.hexdigest()
        return self._digest

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            self._out.close()
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            self._path = None
