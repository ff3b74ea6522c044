"""Every move of a batch from one status to the next, made by whichever executor gets
there first.

    validating   check every line (``inputs``); a bad line, or one of more texts than the
                 tenant's burst, goes to the error file at once; the good ones are queued
                 → in_progress (→ failed when no line can run or the input is gone)
    in_progress  every line has a result → finalizing
    finalizing   the output and error files written → completed
    cancelling   → cancelled
    validating or in_progress past ``expires_at`` → expired. An expired or cancelled
    batch's answered lines are in its output file, the rest in its error file.

A tick reads one page of each status group, the next page on the next tick, so many open
batches never hide a later one; each move is tried on its own, and one that raises is
logged and counted (``headway_batch_move_failures_total``). A failure of the batch's own
(not ``AWAY``) counts against it: ``MAX_FAILURES`` in a row mark it ``failed`` and drop
its queued lines.

Several executors may tick at once and one may die mid-move, so every step is safe to
repeat: a line queued twice is one item, a result is kept once (``store.record``), the
output files have derived ids and are stored by content, and each status change is a
compare-and-set (``store.move``); a batch left in ``finalizing`` is finalized next tick.
Expired files are deleted here too, their bytes once no record names them. A batch not
yet adopted by its tenant (``LEGACY_TENANT_ID``) is never moved: what a move wrote would
be nobody's.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Literal

from headway.batches import output
from headway.batches.filestore import PARTIAL_FILE_AGE_S, FileStore, FileWriter
from headway.batches.inputs import InputMissing, Inputs, ParsedInput
from headway.batches.jsonl import Line
from headway.batches.metrics import ExecutorMetrics
from headway.batches.model import (
    LEGACY_TENANT_ID,
    Batch,
    BatchStatus,
    FileObject,
    LineError,
    LineResult,
    derived_file_id,
)
from headway.batches.offload import off_loop
from headway.batches.planted import duplicating_first_answer
from headway.batches.queue import WorkItem, WorkQueue, WorkQueueUnavailable
from headway.batches.store import BatchStore, BatchStoreError, BatchStoreUnavailable
from headway.registry.errors import RegistryUnavailable

log = logging.getLogger(__name__)

VALIDATING: tuple[BatchStatus, ...] = ("validating",)
IN_PROGRESS: tuple[BatchStatus, ...] = ("in_progress",)
FINALIZING: tuple[BatchStatus, ...] = ("finalizing",)
CANCELLING: tuple[BatchStatus, ...] = ("cancelling",)
CLOSING: tuple[BatchStatus, ...] = ("in_progress", "finalizing")
EXPIRING: tuple[BatchStatus, ...] = ("validating", "in_progress")
OPEN: tuple[BatchStatus, ...] = ("validating", "in_progress", "finalizing", "cancelling")
PAGE_SIZE = 100
"""Batches of one status group a tick looks at (``Mover._page``)."""
MAX_FAILURES = 5
"""Failed attempts in a row at a batch's move, of its own, before the batch is marked
``failed`` (at ``executor.poll_s`` a tick, a few seconds of trying)."""
AWAY = (BatchStoreUnavailable, WorkQueueUnavailable, RegistryUnavailable)
"""Failures that are not the batch's: waited out, never counted against it."""
MAX_ERRORS = 100
"""Most line errors a batch object lists in ``errors`` (all are in the error file)."""
UNNAMED_AGE_S = PARTIAL_FILE_AGE_S
"""Stored bytes no record names are swept once this old (``sweep_unnamed``): a record being
committed now, through any path, names bytes written well within a day."""
NOT_RUN_MESSAGE = {
    "expired": ("batch_expired", output.EXPIRED_MESSAGE),
    "cancelled": ("batch_cancelled", output.CANCELLED_MESSAGE),
}


Bursts = Callable[[int], float | None]
"""A tenant's burst in texts (the most its quota grants at once) by its id, None if
unknown: read synchronously (off the loop), from the registry in an executor
(``bursts.py``)."""


def no_bursts(tenant_id: int) -> float | None:
    return None


class Mover:
    def __init__(
        self,
        store: BatchStore,
        queue: WorkQueue,
        files: FileStore,
        inputs: Inputs,
        retention_s: int,
        wall_clock: Callable[[], float],
        *,
        bursts: Bursts = no_bursts,
        metrics: ExecutorMetrics | None = None,
        page_size: int = PAGE_SIZE,
        duplicate_a_line: bool = False,
    ) -> None:
        """``duplicate_a_line``: a planted bug for the chaos checker's tests
        (``batches/planted.py``)."""
        self._store, self._queue, self._files = store, queue, files
        self._inputs, self._retention_s, self._clock = inputs, retention_s, wall_clock
        self._bursts = bursts
        self._page_size = page_size
        self._duplicate_a_line = duplicate_a_line
        self._cursors: dict[tuple[BatchStatus, ...], tuple[int, str] | None] = {}
        """Where each status group's next page starts (``_page``)."""
        self._metrics = metrics or ExecutorMetrics()
        self._failures: dict[str, int] = {}
        """Batch id → its moves' failures in a row (of its own), in this process."""
        self._away: set[str] = set()
        """Batches whose last move waited for a store, the queue or the registry."""

    def now(self) -> int:
        return int(self._clock())

    async def tick(self) -> None:
        for batch in await self._page(VALIDATING):
            if batch.tenant_id == LEGACY_TENANT_ID:
                continue  # nobody's until adopted (the module docstring)
            if self.now() >= batch.expires_at:
                await self._attempt("expire", batch, self._expire)
            else:
                await self._attempt("validate", batch, self.validate)
        for batch in await self._page(CANCELLING):
            if batch.tenant_id != LEGACY_TENANT_ID:
                await self._attempt("cancel", batch, self._cancel)
        for batch in await self._page(CLOSING):
            if batch.tenant_id == LEGACY_TENANT_ID:
                continue
            if batch.status == "in_progress" and self.now() >= batch.expires_at:
                await self._attempt("expire", batch, self._expire)
            elif batch.status == "finalizing" or _all_answered(batch):
                await self._attempt("finalize", batch, self.finalize)

    async def validate(self, batch: Batch) -> None:
        try:
            parsed = await self._inputs.of(batch)
        except InputMissing:
            gone = LineError(0, "missing_input_file", "the input file was deleted or expired")
            await self._fail(batch, [gone])
            return
        burst = await off_loop(self._bursts, batch.tenant_id)
        lines, too_big = _within_burst(parsed.lines, burst)
        errors = sorted(parsed.errors + too_big, key=lambda e: e.line)
        if not lines:
            await self._fail(batch, errors or [LineError(0, "empty_file", "no lines")])
            return
        not_run = [
            LineResult(e.line, False, output.not_run(batch.id, e.line, None, e.code, e.message))
            for e in errors
        ]
        if not_run:
            await off_loop(self._store.record_many, batch.id, not_run)
        await self._queue.put(
            [WorkItem(batch.id, n, batch.tenant_id, batch.tenant) for n in sorted(lines)]
        )
        total = len(lines) + len(errors)
        errors = errors[:MAX_ERRORS]
        moved = await off_loop(
            self._store.move,
            batch.id,
            VALIDATING,
            "in_progress",
            self.now(),
            total=total,
            errors=errors,
        )
        if moved is not None:
            log.info("batch %s: %d lines queued, %d refused", batch.id, len(lines), len(errors))

    async def finalize(self, batch: Batch) -> None:
        store = self._store
        if batch.status == "in_progress":
            moved = await off_loop(store.move, batch.id, IN_PROGRESS, "finalizing", self.now())
            if moved is None:
                return  # another executor is finalizing it, or it was cancelled
            batch = moved
        out, err = await self._write_files(batch, lambda: store.results(batch.id))
        done = await off_loop(
            store.move,
            batch.id,
            FINALIZING,
            "completed",
            self.now(),
            output_file_id=out,
            error_file_id=err,
        )
        if done is not None:
            counts = done.counts
            log.info(
                "batch %s completed: %d answered, %d failed",
                batch.id,
                counts.completed,
                counts.failed,
            )
            self._inputs.forget(batch.id)

    async def end(self, batch: Batch, to: Literal["expired", "cancelled"]) -> None:
        """A batch stopped before every line ran: what ran is its output; the rest goes to
        the error file as never run."""
        store = self._store
        try:
            parsed: ParsedInput | None = await self._inputs.of(batch)
        except InputMissing:
            parsed = None
        code, message = NOT_RUN_MESSAGE[to]
        lines = parsed.lines if parsed is not None else {}
        never_ran = [
            LineResult(n, False, output.not_run(batch.id, n, lines[n].custom_id, code, message))
            for n in sorted(lines)
        ]

        def results() -> Iterator[LineResult]:
            """Each line once: its result if it has one when read, else never ran (a line
            that finishes after this read is in neither file, never in both)."""
            last = 0
            merged = heapq.merge(store.results(batch.id), never_ran, key=lambda r: r.line)
            for result in merged:  # for one line, the stored result comes first
                if result.line != last:
                    last = result.line
                    yield result

        out, err = await self._write_files(batch, results)
        total = batch.counts.total or len(lines) + (len(parsed.errors) if parsed else 0)
        frm: tuple[BatchStatus, ...] = CANCELLING if to == "cancelled" else EXPIRING
        moved = await off_loop(
            store.move,
            batch.id,
            frm,
            to,
            self.now(),
            total=total,
            output_file_id=out,
            error_file_id=err,
        )
        await self._queue.drop(batch.id)
        if moved is not None:
            counts = moved.counts
            log.info(
                "batch %s %s: %d of %d lines ran",
                batch.id,
                to,
                counts.completed + counts.failed,
                total,
            )
            self._inputs.forget(batch.id)

    async def reap_files(self) -> None:
        """Delete files past their ``expires_at``."""
        store = self._store
        for record in await off_loop(store.expired_files, self.now()):
            await off_loop(store.delete_file_by_id, record.id)
            await off_loop(store.release_content, record.sha256, self._files.delete)
            log.info("file %s expired and was deleted", record.id)

    async def sweep_unnamed(self) -> int:
        """Remove stored bytes that no record names and that were last written over
        ``UNNAMED_AGE_S`` ago: left by a process killed between placing an upload's bytes
        and committing its record, or between deleting a record and releasing its bytes.
        Each is released under its content's lock (``release_content``), so a copy an
        upload is reusing now stays. How many went."""
        store, files = self._store, self._files
        removed = 0
        for digest in await off_loop(lambda: list(files.stored(UNNAMED_AGE_S, self.now()))):
            if await off_loop(store.release_content, digest, files.delete):
                removed += 1
        if removed:
            log.info("%d stored files no record named were removed", removed)
        return removed

    async def _page(self, statuses: tuple[BatchStatus, ...]) -> list[Batch]:
        """Up to ``page_size`` batches in ``statuses``, going on from where the last tick's
        page ended and round to the oldest again, so that however many batches there are,
        each is looked at every few ticks (not only the oldest page's)."""
        store, size = self._store, self._page_size
        after = self._cursors.get(statuses)
        page = await off_loop(store.batches_in, statuses, size, after)
        if len(page) < size and after is not None:  # the end: on from the oldest
            seen = {batch.id for batch in page}
            oldest = await off_loop(store.batches_in, statuses, size - len(page))
            page += [batch for batch in oldest if batch.id not in seen]
        last = page[-1] if len(page) == size else None
        self._cursors[statuses] = None if last is None else (last.created_at, last.id)
        return page

    async def _expire(self, batch: Batch) -> None:
        await self.end(batch, "expired")

    async def _cancel(self, batch: Batch) -> None:
        await self.end(batch, "cancelled")

    async def _attempt(
        self, move: str, batch: Batch, step: Callable[[Batch], Awaitable[None]]
    ) -> None:
        """``step(batch)``, isolated: what it raises stays with this batch (docstring)."""
        try:
            await step(batch)
        except Exception as exc:
            if isinstance(exc, AWAY):
                self._metrics.move_failed(move, "unavailable")
                if batch.id not in self._away:  # once until it moves again
                    self._away.add(batch.id)
                    log.warning("batch %s: cannot %s it now: %s", batch.id, move, exc)
                return
            failures = self._failures[batch.id] = self._failures.get(batch.id, 0) + 1
            self._metrics.move_failed(move, "error")
            log.error(
                "batch %s: %s failed (%s), %d of %d tries in a row",
                batch.id,
                move,
                type(exc).__name__,
                failures,
                MAX_FAILURES,
                exc_info=exc,
            )
            if failures >= MAX_FAILURES:
                await self._give_up(move, batch, exc)
        else:
            self._failures.pop(batch.id, None)
            self._away.discard(batch.id)

    async def _give_up(self, move: str, batch: Batch, exc: Exception) -> None:
        """Mark a batch that keeps failing ``failed``, the reason first in its errors."""
        reason = LineError(
            0,
            "batch_failed",
            f"the batch executor could not {move} this batch: {MAX_FAILURES} tries in a row"
            f" failed ({type(exc).__name__}); it was stopped so that it holds up nothing",
        )
        try:
            moved = await off_loop(
                self._store.move,
                batch.id,
                OPEN,
                "failed",
                self.now(),
                errors=[reason, *batch.errors][:MAX_ERRORS],
            )
            await self._queue.drop(batch.id)
        except Exception as failed:  # tried again on its next failure
            log.error("batch %s: could not mark it failed: %r", batch.id, failed)
            return
        self._failures.pop(batch.id, None)
        self._inputs.forget(batch.id)
        if moved is not None:
            self._metrics.move_failed(move, "given_up")
            log.error("batch %s failed: %s", batch.id, reason.message)

    async def _fail(self, batch: Batch, errors: list[LineError]) -> None:
        await off_loop(
            self._store.move,
            batch.id,
            VALIDATING,
            "failed",
            self.now(),
            total=0,
            errors=errors[:MAX_ERRORS],
        )
        log.info("batch %s failed validation: %s", batch.id, errors[0].code)

    async def _write_files(
        self, batch: Batch, results: Callable[[], Iterable[LineResult]]
    ) -> tuple[str | None, str | None]:
        """The batch's output and error files (each only if it has a line): their lines
        streamed to temporary files as the results are read, hashed as written, then moved
        into place and recorded once under the batch's own ids; those ids."""

        def lines() -> Iterable[LineResult]:
            if self._duplicate_a_line:
                return duplicating_first_answer(results())
            return results()

        answers = await off_loop(self._files.writer)
        try:
            errors = await off_loop(self._files.writer)
            try:
                written = await off_loop(lambda: output.write_lines(lines(), answers, errors))
                out = await self._keep(batch, "output", answers, written[0]) if written[0] else None
                err = await self._keep(batch, "error", errors, written[1]) if written[1] else None
            finally:
                await off_loop(errors.discard)  # nothing, once committed
        finally:
            await off_loop(answers.discard)
        return out, err

    async def _keep(
        self, batch: Batch, which: Literal["output", "error"], written: FileWriter, lines: int
    ) -> str:
        store = self._store
        file_id = derived_file_id(batch.id, which)
        digest = await off_loop(written.seal)
        if await off_loop(store.file, batch.tenant_id, file_id) is not None:
            return file_id  # recorded by another executor, or before a crash: the same bytes
        now = self.now()
        record = FileObject(
            id=file_id,
            tenant_id=batch.tenant_id,
            tenant=batch.tenant,
            purpose="batch_output",
            filename=f"{batch.id}_{which}.jsonl",
            bytes=written.size,
            sha256=digest,
            created_at=now,
            expires_at=now + self._retention_s,
            lines=lines,
        )
        try:
            await off_loop(store.add_file, record, place=written.place)
        except BatchStoreError:  # another executor recorded it first: the same file
            if await off_loop(store.file, batch.tenant_id, file_id) is None:
                raise
        return file_id


def _within_burst(
    lines: dict[int, Line], burst: float | None
) -> tuple[dict[int, Line], list[LineError]]:
    """The lines a quota of ``burst`` texts at once can ever pass, and an error for each
    other: the gateway would refuse it with a 429 for ever (no Retry-After)."""
    if burst is None:
        return lines, []
    fit = {n: line for n, line in lines.items() if line.texts <= burst}
    errors = [
        LineError(
            n,
            "line_exceeds_burst",
            f"this line's {line.texts} texts are more than the tenant's burst of {burst:g}"
            f" texts (the most its quota grants at once), so it could never run; split it"
            f" into lines of at most {burst:g}",
            "body",
        )
        for n, line in sorted(lines.items())
        if n not in fit
    ]
    return fit, errors


def _all_answered(batch: Batch) -> bool:
    counts = batch.counts
    return counts.total > 0 and counts.completed + counts.failed >= counts.total
