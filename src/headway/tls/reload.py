"""A TLS context that follows its files: rotate a certificate on disk, no restart.

``ContextSource.current()`` is the context for the next connection. ``ReloadingContext`` builds
one at start (a file it cannot use then is an error); asked again at least ``interval_s`` after
its last look, it stats the files (mtime, size, inode: a Kubernetes secret swaps a symlink),
reads them only if changed, and builds and swaps in a context only if their bytes changed. A
change it cannot load keeps the previous context and is warned of once per state of the files.

The look happens on use, in the thread that asks: no watcher thread, nothing read by an idle
process. A server is handed ``serving()`` once, whose ``sni_callback`` sets each handshake's
context to ``current()`` (OpenSSL calls it on every ClientHello, with or without a server
name): new connections get the new certificate and CA, open ones keep theirs. A client asks
``current()`` for each request, and its pool keys connections by context.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from headway.tls.contexts import TlsFilesInvalid

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], ...]
"""(mtime ns, size, inode) per file."""
MISSING: Stamp = ((-1, -1, -1),)
"""The stamp of files one of which is missing."""


class ContextSource(Protocol):
    def current(self) -> ssl.SSLContext: ...


class FixedContext:
    """A context that never changes: the fake of ``ReloadingContext``."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context

    def current(self) -> ssl.SSLContext:
        return self.context


class ReloadingContext:
    """The latest context built from ``files`` (see the module's docstring). Not locked:
    two threads that look at once may both build the fresh context; either is right."""

    def __init__(
        self,
        build: Callable[[], ssl.SSLContext],
        files: Sequence[Path],
        *,
        interval_s: float,
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self._files = tuple(files)
        self._interval_s = interval_s
        self._what = what
        self._clock = clock
        self._stamp = _stamp(self._files)
        try:
            self._digest = _digest(self._files)
        except OSError as exc:
            raise TlsFilesInvalid(_reason(exc)) from exc
        self._context = build()
        self._checked_at = clock()
        self._refused: Stamp | None = None
        self.reloads = 0
        """How many times a fresh context was swapped in."""

    def current(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked_at >= self._interval_s:
            self._checked_at = now
            self.check()
        return self._context

    def check(self) -> bool:
        """Look at the files now; True if a fresh context was swapped in."""
        stamp = _stamp(self._files)
        if stamp in (self._stamp, self._refused):
            return False
        try:
            digest = _digest(self._files)
            if digest == self._digest:
                self._stamp = stamp
                return False
            context = self._build()
        except (TlsFilesInvalid, OSError) as exc:
            self._refused = stamp  # one warning for this state of the files
            log.warning(
                "tls: the %s files changed but cannot be loaded; keeping the previous ones: %s",
                self._what,
                _reason(exc),
            )
            return False
        self._context, self._stamp, self._digest, self._refused = context, stamp, digest, None
        self.reloads += 1
        log.info("tls: reloaded the %s certificate", self._what)
        return True

    def serving(self) -> ssl.SSLContext:
        """The context to give a server once: every handshake switches to ``current()``."""
        base = self._context
        base.sni_callback = self._on_client_hello
        return base

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, base: object
    ) -> None:
        latest = self.current()
        if ssl_object.context is not latest:
            ssl_object.context = latest


def _stamp(files: Sequence[Path]) -> Stamp:
    try:
        stats = [os.stat(path) for path in files]
    except OSError:
        return MISSING
    return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)


def _digest(files: Sequence[Path]) -> bytes:
    sha = hashlib.sha256()
    for path in files:
        data = path.read_bytes()
        sha.update(len(data).to_bytes(8, "big") + data)
    return sha.digest()


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    return str(exc)
