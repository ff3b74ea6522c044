"""Real ``headway gateway`` processes started in milliseconds, for tests that kill many.

Run as ``python -m tests.batches.gateway_forks``: it imports the gateway's code once, then
for each line read on stdin (the arguments of ``headway gateway``, split on spaces) forks
a child that runs exactly that command, and writes the child's pid on stdout. A child is
a process of its own (its stores opened, its sockets bound, after the fork), so killing it
is killing a gateway; only the import time is shared. Dead children are reaped as they
die; at the end of stdin the children left are killed, and it exits.

On a loaded 2-core machine a fresh interpreter takes 6 to 16 s to import the gateway,
which a loop of kills cannot pay each time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

import headway.app.process
import headway.cli.serve  # imported before any fork, once
import headway.serve  # noqa: F401
from headway.cli import app


def _reap(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _child(arguments: list[str]) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # stdin is the parent's command pipe
    os.dup2(2, 1)  # and stdout its answers: the child's output goes to stderr
    code = 0
    try:
        app(["run", "gateway", *arguments], standalone_mode=False)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    children: list[int] = []
    signal.signal(signal.SIGCHLD, _reap)
    for line in sys.stdin:
        arguments = line.split()
        if not arguments:
            continue
        pid = os.fork()
        if pid == 0:
            _child(arguments)
        children.append(pid)
        print(pid, flush=True)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
