"""Shadow chunks run only in spare capacity: refused at once unless the worker is idle."""

from __future__ import annotations

import asyncio

import pytest

from headway import wire
from headway.errors import Overloaded
from headway.worker.app import WorkerService
from headway.worker.batcher import BatchLimits
from headway.worker.sources import FixedSource, LoadedModel
from tests.fakes import RecordingBackend, until


class WarmableBackend(RecordingBackend):
    """Encodes words that are not numbers (the warm-up text) as token 0."""

    def encode_texts(self, texts, truncation="right"):  # type: ignore[no-untyped-def]
        return super().encode_texts(
            [" ".join(w if w.isdigit() else "0" for w in t.split()) for t in texts], truncation
        )


def chunk(texts: int, priority: wire.Priority) -> wire.EmbedChunk:
    return wire.EmbedChunk("r", [f"{i + 1}" for i in range(texts)], 5_000, priority)


async def test_a_shadow_chunk_is_refused_while_anything_runs_or_waits() -> None:
    backend = WarmableBackend()
    service = WorkerService(
        "embed",
        FixedSource(lambda: LoadedModel(backend, "v")),
        BatchLimits(max_batch_size=4, max_wait_s=0),
    )
    await service.start()
    try:
        backend.gate.clear()
        backend.entered.clear()
        running = asyncio.create_task(service.embed(chunk(4, wire.Priority.INTERACTIVE)))
        await until(backend.entered.is_set)  # the inference thread is busy, the queue empty
        with pytest.raises(Overloaded, match="idle worker"):
            await service.embed(chunk(1, wire.Priority.SHADOW))
        backend.gate.set()
        assert (await running).rows == 4
        await until(lambda: service.outstanding_texts == 0)
        assert (await service.embed(chunk(2, wire.Priority.SHADOW))).rows == 2
    finally:
        backend.gate.set()
        await service.stop()
