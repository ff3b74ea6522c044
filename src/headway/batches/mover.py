"""Every move of a batch from one status to the next, made by whichever executor gets
there first.

    validating   read and check every line (``inputs``); a bad line becomes an error-
                 file line at once; the good ones are queued; → in_progress (→ failed
                 when no line can run, or the input is gone)
    in_progress  when every line has a result → finalizing; past ``expires_at`` → expired
    finalizing   the output and error files are written → completed
    cancelling   → cancelled
    (expired, cancelled: the lines answered so far are in the output file; the lines
    that never ran are in the error file, ``batch_expired`` / ``batch_cancelled``)

Several executors may run ``tick`` at once, and one may die in the middle of a move:
every step here is safe to repeat. Queuing a line twice makes one item; a line result
is kept once (``store.record``); the output and error files are named by the batch
(``derived_file_id``) and stored by content, so writing them again writes the same
files; and each status change is a compare-and-set (``store.move``): of two executors
moving one batch, one wins and the other's move is a no-op. A batch left in
``finalizing`` by a dead executor is finalized by the next tick.

Expired files (inputs and outputs past their ``expires_at``) are deleted here too:
the record, then its bytes when no other record names them.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

from headway.batches import output
from headway.batches.filestore import FileStore, FileWriter
from headway.batches.inputs import InputMissing, Inputs, ParsedInput
from headway.batches.model import (
    Batch,
    BatchStatus,
    FileObject,
    LineError,
    LineResult,
    derived_file_id,
)
from headway.batches.offload import off_loop
from headway.batches.queue import WorkItem, WorkQueue
from headway.batches.store import BatchStore, BatchStoreError

log = logging.getLogger(__name__)

VALIDATING: tuple[BatchStatus, ...] = ("validating",)
IN_PROGRESS: tuple[BatchStatus, ...] = ("in_progress",)
FINALIZING: tuple[BatchStatus, ...] = ("finalizing",)
CANCELLING: tuple[BatchStatus, ...] = ("cancelling",)
CLOSING: tuple[BatchStatus, ...] = ("in_progress", "finalizing")
MAX_ERRORS = 100
"""Most line errors a batch object lists in ``errors`` (all are in the error file)."""
NOT_RUN_MESSAGE = {
    "expired": ("batch_expired", output.EXPIRED_MESSAGE),
    "cancelled": ("batch_cancelled", output.CANCELLED_MESSAGE),
}


class Mover:
    def __init__(
        self,
        store: BatchStore,
        queue: WorkQueue,
        files: FileStore,
        inputs: Inputs,
        retention_s: int,
        wall_clock: Callable[[], float],
    ) -> None:
        self._store, self._queue, self._files = store, queue, files
        self._inputs, self._retention_s, self._clock = inputs, retention_s, wall_clock

    def now(self) -> int:
        return int(self._clock())

    async def tick(self) -> None:
        store = self._store
        for batch in await off_loop(store.batches_in, VALIDATING):
            await self.validate(batch)
        for batch in await off_loop(store.batches_in, CANCELLING):
            await self.end(batch, "cancelled")
        for batch in await off_loop(store.batches_in, CLOSING):
            if batch.status == "in_progress" and self.now() >= batch.expires_at:
                await self.end(batch, "expired")
            elif batch.status == "finalizing" or _all_answered(batch):
                await self.finalize(batch)

    async def validate(self, batch: Batch) -> None:
        try:
            parsed = await self._inputs.of(batch)
        except InputMissing:
            gone = LineError(0, "missing_input_file", "the input file was deleted or expired")
            await self._fail(batch, [gone])
            return
        if not parsed.lines:
            await self._fail(batch, parsed.errors or [LineError(0, "empty_file", "no lines")])
            return
        not_run = [
            LineResult(e.line, False, output.not_run(batch.id, e.line, None, e.code, e.message))
            for e in parsed.errors
        ]
        if not_run:
            await off_loop(self._store.record_many, batch.id, not_run)
        await self._queue.put([WorkItem(batch.id, n, batch.tenant) for n in sorted(parsed.lines)])
        total = len(parsed.lines) + len(parsed.errors)
        errors = parsed.errors[:MAX_ERRORS]
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
            log.info(
                "batch %s: %d lines queued, %d refused",
                batch.id,
                len(parsed.lines),
                len(parsed.errors),
            )

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
        frm: tuple[BatchStatus, ...] = CANCELLING if to == "cancelled" else IN_PROGRESS
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
            if not await off_loop(store.digest_in_use, record.sha256):
                await off_loop(self._files.delete, record.sha256)
            log.info("file %s expired and was deleted", record.id)

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
        answers = await off_loop(self._files.writer)
        try:
            errors = await off_loop(self._files.writer)
            try:
                written = await off_loop(lambda: output.write_lines(results(), answers, errors))
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
        digest = await off_loop(written.commit)
        if await off_loop(store.file, batch.tenant, file_id) is not None:
            return file_id
        now = self.now()
        record = FileObject(
            id=file_id,
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
            await off_loop(store.add_file, record)
        except BatchStoreError:  # another executor recorded it first: the same file
            if await off_loop(store.file, batch.tenant, file_id) is None:
                raise
        return file_id


def _all_answered(batch: Batch) -> bool:
    counts = batch.counts
    return counts.total > 0 and counts.completed + counts.failed >= counts.total
