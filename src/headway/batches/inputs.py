"""A batch's input file, read and checked line by line once per executor process.

Validation and ending a batch early need the whole file parsed (``of``: the last
``KEEP_BATCHES`` kept, least recently used out first). Running a line needs only that line:
``line`` finds it in the batch's ``LineIndex`` and reads its bytes again, so lines of many
batches running side by side cost a lookup and a short read each, never a parse of their
file. Bodies are checked with the gateway's own parser and limits, so a line valid here is
one the gateway accepts.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from headway.batches.filestore import FileStore
from headway.batches.jsonl import Line, read_lines, reread
from headway.batches.model import Batch, LineError
from headway.batches.store import BatchStore
from headway.protocols.embeddings import parse_embeddings
from headway.protocols.rerank import parse_rerank
from headway.settings import LimitsSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

KEEP_BATCHES = 4
"""Parsed files kept (each about as large as its file)."""
KEEP_INDEXES = 256
"""Line indexes kept (each about 32 bytes a good line: 1.6 MB for 50,000 lines)."""


class InputMissing(Exception):
    """The batch's input file is gone (deleted, expired, its tenant deleted)."""


@dataclass(frozen=True, slots=True)
class ParsedInput:
    lines: dict[int, Line]
    """By line number."""
    errors: list[LineError]
    digest: str = ""
    """The file's content digest (where its bytes are in the file store)."""


@dataclass(frozen=True, slots=True)
class LineIndex:
    """Where each good line of a batch's input lies in its file, and its texts."""

    digest: str
    numbers: array[int]
    """Line numbers, ascending; the other arrays are in the same order."""
    starts: array[int]
    ends: array[int]
    texts: array[int]

    @classmethod
    def of(cls, parsed: ParsedInput) -> LineIndex:
        lines = [parsed.lines[n] for n in sorted(parsed.lines)]
        return cls(
            parsed.digest,
            array("q", (line.number for line in lines)),
            array("q", (line.start for line in lines)),
            array("q", (line.end for line in lines)),
            array("q", (line.texts for line in lines)),
        )

    def find(self, number: int) -> tuple[int, int, int] | None:
        """(start, end, texts) of the good line ``number``; None if it is not one."""
        at = bisect.bisect_left(self.numbers, number)
        if at == len(self.numbers) or self.numbers[at] != number:
            return None
        return self.starts[at], self.ends[at], self.texts[at]


def body_parser(endpoint: str, limits: LimitsSettings) -> Callable[[bytes], int]:
    """The endpoint's strict parser: a line's body → its texts (raises what the gateway
    would: both read bodies with ``headway.protocols``)."""
    if endpoint == "/v1/embeddings":
        return lambda body: len(parse_embeddings(body, limits).inputs)
    return lambda body: len(parse_rerank(body, limits).documents)


class Inputs:
    def __init__(
        self, store: BatchStore, files: FileStore, limits: LimitsSettings, max_inputs: int
    ) -> None:
        self._store, self._files = store, files
        self._limits, self._max_inputs = limits, max_inputs
        self._parsed: OrderedDict[str, ParsedInput] = OrderedDict()
        self._indexes: OrderedDict[str, LineIndex] = OrderedDict()
        self._reading: dict[str, asyncio.Future[ParsedInput]] = {}

    async def of(self, batch: Batch) -> ParsedInput:
        """The whole file, parsed (validation, and ending a batch early)."""
        parsed = self._parsed.get(batch.id)
        if parsed is not None:
            self._parsed.move_to_end(batch.id)
            return parsed
        parsed = await self._read_once(batch)
        _keep(self._parsed, batch.id, parsed, KEEP_BATCHES)
        return parsed

    async def line(self, batch: Batch, number: int) -> Line | None:
        """The good line ``number``, read again from the file; None if it is not one."""
        index = self._indexes.get(batch.id)
        if index is not None:
            self._indexes.move_to_end(batch.id)
        else:
            parsed = self._parsed.get(batch.id) or await self._read_once(batch)
            index = LineIndex.of(parsed)
            _keep(self._indexes, batch.id, index, KEEP_INDEXES)
        found = index.find(number)
        if found is None:
            return None
        start, end, texts = found
        raw = await asyncio.to_thread(self._files.read_range, index.digest, start, end)
        return reread(number, raw, texts, start)

    def forget(self, batch_id: str) -> None:
        self._parsed.pop(batch_id, None)
        self._indexes.pop(batch_id, None)

    async def _read_once(self, batch: Batch) -> ParsedInput:
        """One read per batch, however many callers ask at once."""
        reading = self._reading.get(batch.id)
        if reading is not None:
            return await asyncio.shield(reading)
        reading = asyncio.ensure_future(asyncio.to_thread(self._read, batch))
        self._reading[batch.id] = reading
        try:
            return await reading
        finally:
            del self._reading[batch.id]

    def _read(self, batch: Batch) -> ParsedInput:
        record = self._store.file(batch.tenant_id, batch.input_file_id)
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
        return ParsedInput({line.number: line for line in lines}, errors, record.sha256)


def _keep(cache: OrderedDict[str, T], key: str, value: T, most: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > most:
        cache.popitem(last=False)
