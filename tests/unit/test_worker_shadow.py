"""Shadow chunks run only in spare capacity: refused at once unless the queue is nearly empty."""

from __future__ import annotations

import asyncio

import pytest

from headway import wire
from headway.errors import Overloaded
from headway.worker.app import WorkerService, spare_capacity
from headway.worker.batcher import BatchLimits
from headway.worker.sources import FixedSource, LoadedModel
from tests.fakes import RecordingBackend, until


class WarmableBackend(RecordingBackend):
    """Encodes words that are not numbers (the warm-up text) as token 0."""

    def encode_texts(self, texts):  # type: ignore[no-untyped-def]
        return super().encode_texts(
            [" ".join(w if w.isdigit() else "0" for w in t.split()) for t in texts]
        )


def chunk(texts: int, priority: wire.Priority) -> wire.EmbedChunk:
    return wire.EmbedChunk("r", [f"{i + 1}" for i in range(texts)], 5_000, priority)


def test_spare_capacity_is_room_in_one_batch() -> None:
    assert spare_capacity(queued_texts=2, texts=2, max_batch_size=4)
    assert not spare_capacity(queued_texts=3, texts=2, max_batch_size=4)


async def test_a_shadow_chunk_is_refused_unless_it_fits_beside_the_queue() -> None:
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
        queued = asyncio.create_task(service.embed(chunk(3, wire.Priority.BATCH)))
        batcher = service.held["v"].batcher
        await until(lambda: batcher.queued_texts == 3)

        with pytest.raises(Overloaded, match="spare capacity"):
            await service.embed(chunk(2, wire.Priority.SHADOW))
        shadow = asyncio.create_task(service.embed(chunk(1, wire.Priority.SHADOW)))
        await until(lambda: batcher.queued_texts == 4)

        backend.gate.set()
        results = await asyncio.gather(running, queued, shadow)
        assert [r.rows for r in results] == [4, 3, 1]
    finally:
        backend.gate.set()
        await service.stop()
