"""Where uploaded and written batch files' bytes live: content-addressed by SHA-256.

A file record (``FileObject``) names its content by digest; the store keeps one copy
of each content however many records point at it (two tenants uploading the same
file share it; the batch store says when no record references a digest any more).
``FileStore`` is the seam: ``DirectoryFileStore`` keeps ``root/ab/cd/<digest>`` on a
local disk; an object store can stand behind the same five calls later.

A ``put`` is durable before it returns and never visible half-written: the bytes go
to a temporary file in the digest's directory (a name no digest can have), which is
fsynced, renamed into place (atomic on POSIX) and the directory fsynced. A process
killed mid-``put`` leaves at most a temporary file that ``read`` and ``exists`` never
see. Digests are checked (64 lowercase hex) before they become paths, so no caller
can name a path outside the root.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

from headway.durable import fsync_dir

_DIGEST = re.compile(r"[0-9a-f]{64}")


class FileMissing(KeyError):
    """No content with that digest is stored (never put, or deleted)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "file missing"


class InvalidDigest(ValueError):
    """A digest that is not 64 lowercase hex characters (a SHA-256 hex digest)."""


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


def checked_digest(digest: str) -> str:
    """``digest`` if it is a SHA-256 hex digest, else ``InvalidDigest``."""
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise InvalidDigest(f"{digest!r} is not a SHA-256 digest (64 lowercase hex characters)")
    return digest


class DirectoryFileStore:
    """``FileStore`` on a local directory: ``root/ab/cd/<digest>``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, digest: str) -> Path:
        checked = checked_digest(digest)
        return self.root / checked[:2] / checked[2:4] / checked

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_of(digest)
        if target.is_file():
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
