"""Fakes shared by unit and service tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from headway.worker.backends.base import Encoded, ModelKind


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingBackend:
    """Embeds a text as [first token id, token count]; records every model call.

    ``gate`` (when set) makes ``run`` wait until the test releases it, so a test
    can hold the inference thread busy while it queues more work.
    """

    def __init__(self, *, fail: bool = False, gated: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.fail = fail
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.entered = threading.Event()

    @property
    def kind(self) -> ModelKind:
        return "embedding"

    @property
    def dimensions(self) -> int:
        return 2

    @property
    def call_overhead_tokens(self) -> int:
        return 64

    def encode_texts(self, texts: Sequence[str]) -> list[Encoded]:
        return [Encoded(tuple(int(word) for word in text.split())) for text in texts]

    def encode_pairs(self, query: str, documents: Sequence[str]) -> list[Encoded]:
        raise NotImplementedError

    def run(self, batch: Sequence[Encoded]) -> np.ndarray:
        self.entered.set()
        assert self.gate.wait(10), "test never released the gate"
        self.calls.append([item.ids[0] for item in batch])
        if self.fail:
            raise RuntimeError("model exploded")
        return np.array([[item.ids[0], item.n_tokens] for item in batch], dtype=np.float32)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for a condition on the event loop, failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)
