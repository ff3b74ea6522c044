"""A batch's input file, read and checked line by line once per executor process.

Validation reads the whole file (``jsonl.read_lines``); running a line needs that
line's body again. The parsed file of the few batches an executor is running is kept
here (least recently used goes first), so a line costs a dict lookup, and a batch an
executor picks up after another one died is read once, on its first line.

A line's body is checked with the endpoint's own parser (the gateway's, with the
gateway's limits), so a line that validates here is one the gateway will accept.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from headway.batches.filestore import FileStore
from headway.batches.jsonl import Line, read_lines
from headway.batches.model import Batch, LineError
from headway.batches.store import BatchStore
from headway.gateway.endpoints.embeddings import Embeddings
from headway.gateway.endpoints.rerank import Rerank
from headway.settings import LimitsSettings

log = logging.getLogger(__name__)

KEEP_BATCHES = 4


class InputMissing(Exception):
    """The batch's input file is gone (deleted, expired, its tenant deleted)."""


@dataclass(frozen=True, slots=True)
class ParsedInput:
    lines: dict[int, Line]
    """By line number."""
    errors: list[LineError]


def body_parser(endpoint: str, limits: LimitsSettings) -> Callable[[bytes], int]:
    """The endpoint's strict parser: a line's body → its texts (raises what the gateway would)."""
    parser = Embeddings() if endpoint == "/v1/embeddings" else Rerank(("rerank",))
    return lambda body: parser.parse(body, limits).texts


class Inputs:
    def __init__(
        self, store: BatchStore, files: FileStore, limits: LimitsSettings, max_inputs: int
    ) -> None:
        self._store, self._files = store, files
        self._limits, self._max_inputs = limits, max_inputs
        self._parsed: OrderedDict[str, ParsedInput] = OrderedDict()
        self._reading: dict[str, asyncio.Future[ParsedInput]] = {}

    async def of(self, batch: Batch) -> ParsedInput:
        parsed = self._parsed.get(batch.id)
        if parsed is not None:
            self._parsed.move_to_end(batch.id)
            return parsed
        reading = self._reading.get(batch.id)
        if reading is None:  # one read per batch, however many lines ask at once
            reading = asyncio.ensure_future(asyncio.to_thread(self._read, batch))
            self._reading[batch.id] = reading
            try:
                parsed = await reading
            finally:
                del self._reading[batch.id]
            self._parsed[batch.id] = parsed
            while len(self._parsed) > KEEP_BATCHES:
                self._parsed.popitem(last=False)
            return parsed
        return await asyncio.shield(reading)

    def forget(self, batch_id: str) -> None:
        self._parsed.pop(batch_id, None)

    def _read(self, batch: Batch) -> ParsedInput:
        record = self._store.file(batch.tenant, batch.input_file_id)
        if record is None:
            raise InputMissing(f"input file {batch.input_file_id} of {batch.id} is gone")
        data = self._files.read(record.sha256)
        max_inputs = self._max_inputs if batch.endpoint == "/v1/embeddings" else None
        parse = body_parser(batch.endpoint, self._limits)
        lines, errors = read_lines(data, batch.endpoint, parse, max_inputs=max_inputs)
        unreadable = sum(1 for error in errors if error.code == "unreadable_line")
        if unreadable:  # a parser raised something unexpected: a bug, or a line that finds one
            log.warning(
                "batch %s: %d lines could not be read (%s); each is in its error file",
                batch.id,
                unreadable,
                next(e.message for e in errors if e.code == "unreadable_line"),
            )
        return ParsedInput({line.number: line for line in lines}, errors)
