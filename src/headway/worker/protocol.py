"""The gateway-to-worker wire format: msgpack bodies, float32 results as raw bytes.

A chunk carries its remaining budget (``timeout_ms``, measured when sent, so
clocks need not agree) and its priority; the worker turns the budget into a
deadline on its own clock the moment the chunk arrives.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

CONTENT_TYPE = "application/msgpack"

PRIORITY_INTERACTIVE = 0
PRIORITY_BATCH = 1


class EmbedChunk(msgspec.Struct, forbid_unknown_fields=True):
    request_id: str
    texts: list[str]
    timeout_ms: float
    priority: int = PRIORITY_INTERACTIVE
    model_version: str = ""


class ScoreChunk(msgspec.Struct, forbid_unknown_fields=True):
    request_id: str
    query: str
    documents: list[str]
    timeout_ms: float
    priority: int = PRIORITY_INTERACTIVE
    model_version: str = ""


class ChunkResult(msgspec.Struct):
    """``values`` is little-endian float32: ``[n, dimensions]`` embeddings or ``[n]`` scores."""

    model_version: str
    values: bytes
    rows: int
    dimensions: int
    tokens: int

    def array(self) -> npt.NDArray[np.float32]:
        flat = np.frombuffer(self.values, dtype="<f4")
        return flat.reshape(self.rows, self.dimensions) if self.dimensions > 1 else flat


class WorkerError(msgspec.Struct):
    type: str
    message: str


encode = msgspec.msgpack.Encoder().encode
embed_decoder = msgspec.msgpack.Decoder(EmbedChunk)
score_decoder = msgspec.msgpack.Decoder(ScoreChunk)
result_decoder = msgspec.msgpack.Decoder(ChunkResult)
error_decoder = msgspec.msgpack.Decoder(WorkerError)
