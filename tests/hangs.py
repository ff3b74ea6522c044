"""A test that hangs fails loudly instead, with the stack of everything that was waiting.

``dumped_on_timeout(timeout_s)`` wraps the part of a test that could hang. When the time
is up it writes, before anything is cancelled (so each stack still shows where its task
waits), every asyncio task's stack and every thread's (``faulthandler``) to stderr, then
cancels the wrapped block and raises ``Hung`` with the same dump: a hang becomes a
failure whose report says what never resolved.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import io
import sys
import tempfile
import traceback
from collections.abc import AsyncIterator
from typing import Any


class Hung(AssertionError):
    """The wrapped block did not finish in time; the message is the task and thread dump."""


def task_stacks(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """Every unfinished task of ``loop`` (default: the running one): its repr (state,
    ``cancelling`` if a cancel was asked for, what it waits for) and its await chain,
    innermost call last. ``Task.print_stack`` shows only the outermost frame of a
    suspended coroutine; the chain follows ``cr_await`` down to where it waits."""
    tasks = sorted(asyncio.all_tasks(loop), key=lambda task: task.get_name())
    out = io.StringIO()
    out.write(f"--- {len(tasks)} asyncio tasks ---\n")
    for task in tasks:
        out.write(f"\n{task!r}\n")
        out.writelines(traceback.format_list(await_chain(task.get_coro())))
    return out.getvalue()


def await_chain(awaitable: object) -> list[traceback.FrameSummary]:
    """The frames of a suspended coroutine and of each coroutine (or generator) it
    awaits in turn, outermost first."""
    frames: list[traceback.FrameSummary] = []
    while awaitable is not None:
        frame = _first_of(awaitable, ("cr_frame", "gi_frame", "ag_frame"))
        if frame is None:
            break
        frames.append(
            traceback.FrameSummary(
                frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, lookup_line=True
            )
        )
        awaitable = _first_of(awaitable, ("cr_await", "gi_yieldfrom", "ag_await"))
    return frames


def _first_of(thing: object, attributes: tuple[str, ...]) -> Any:
    """The first of ``attributes`` that ``thing`` has and is not None (a coroutine, a
    generator and an async generator name the same parts differently)."""
    return next((v for a in attributes if (v := getattr(thing, a, None)) is not None), None)


def thread_stacks() -> str:
    """Every thread's stack, as ``faulthandler`` sees it (it writes only to a real file)."""
    with tempfile.TemporaryFile(mode="w+") as file:
        faulthandler.dump_traceback(file=file, all_threads=True)
        file.seek(0)
        return "--- threads ---\n" + file.read()


@contextlib.asynccontextmanager
async def dumped_on_timeout(timeout_s: float) -> AsyncIterator[None]:
    """Run the block; if it is still running after ``timeout_s``, dump and fail (see the
    module docstring)."""
    task = asyncio.current_task()
    assert task is not None
    dump: list[str] = []

    def expire() -> None:
        dump.append(task_stacks() + "\n" + thread_stacks())
        print(f"\n=== hung for {timeout_s} s ===\n{dump[0]}", file=sys.stderr, flush=True)
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        yield
        if dump:  # cancelled, but something inside swallowed the cancellation
            raise Hung(f"still running after {timeout_s} s:\n{dump[0]}")
    except asyncio.CancelledError:
        if not dump:
            raise
        task.uncancel()
        raise Hung(f"still running after {timeout_s} s:\n{dump[0]}") from None
    finally:
        timer.cancel()
