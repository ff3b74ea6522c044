"""What every throw-away server for tests shares: one child process in its own temp dir.

A subclass makes ``self._dir`` and starts ``self._process`` in ``start()``; this gives
it ``running``, ``pid``, ``stop`` (SIGTERM, then SIGKILL after ``timeout_s``), ``kill``
(SIGKILL, as in a crash), ``close`` (stop and remove the directory) and the context
manager. ``start()`` after ``stop()`` or ``kill()`` comes back on the same port and
directory, so a test can take a server away mid-load and bring it back.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
from types import TracebackType
from typing import Self


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ServerProcess:
    _dir: tempfile.TemporaryDirectory[str]
    _process: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then wait for it to exit (SIGKILL after ``timeout_s``)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout_s)
        self._process = None

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as in a crash."""
        self._reap()

    def _reap(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait(10.0)
        self._process = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
