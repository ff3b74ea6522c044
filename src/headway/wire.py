"""The gateway-to-worker wire format: msgpack bodies, float32 results as raw bytes.

Both sides import this module and nothing of each other. A chunk names the
endpoint it goes to (``path``), carries its remaining budget (``timeout_ms``,
stamped by the gateway at the moment each attempt is sent, so no two clocks
need to agree; the worker turns it into a deadline on its own clock when the
chunk arrives) and its priority: a worker's queue serves the lower number
first (interactive before batch), earliest deadline first within one priority.
A shadow chunk (a copy for comparison, never awaited by a client) runs only in
spare capacity: a worker refuses it at once unless its queue is nearly empty.

Every answer with a result also carries ``COMPLETED_HEADER``: the texts of
interactive and batch chunks the worker has completed since it started, a counter
that only grows. A gateway reads how much the whole pool completes from it, every
gateway's share included, so that with several gateways each sizes its admission
for its own share of the pool (``gateway/admission/``). It is a header, not a
``ChunkResult`` field, so that either side may predate it: a gateway that does not
read it, or a worker that does not send it, works as before.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar, Literal

import msgspec
import numpy as np
import numpy.typing as npt

CONTENT_TYPE = "application/msgpack"
COMPLETED_HEADER = "x-headway-completed-texts"


class Priority(IntEnum):
    """Which queued work a worker runs first: the lower value."""

    INTERACTIVE = 0
    BATCH = 1
    SHADOW = 2
    """Refused (503) unless queued texts plus the chunk's fit in one batch."""


Truncation = Literal["right", "left", "none"]
"""Where a text over the model's limit loses tokens (``none``: refused, 422)."""


class EmbedChunk(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Texts to embed. Fields at their defaults are not sent: a worker that predates one
    reads every chunk that does not need it."""

    path: ClassVar[str] = "/internal/embed"

    request_id: str
    texts: list[str]
    timeout_ms: float
    priority: Priority = Priority.INTERACTIVE
    model_version: str = ""
    truncation: Truncation = "right"


class ScoreChunk(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Documents to score against one query (defaults not sent, as for ``EmbedChunk``)."""

    path: ClassVar[str] = "/internal/score"

    request_id: str
    query: str
    documents: list[str]
    timeout_ms: float
    priority: Priority = Priority.INTERACTIVE
    model_version: str = ""
    truncation: Truncation = "right"


Chunk = EmbedChunk | ScoreChunk


class ChunkResult(msgspec.Struct):
    """``values`` is little-endian float32: ``[n, dimensions]`` embeddings or ``[n]`` scores."""

    model_version: str
    values: bytes
    rows: int
    dimensions: int
    tokens: int
    queue_s: float = 0.0
    """How long the chunk waited in the worker's queue."""
    inference_s: float = 0.0
    """How long the batch that served it ran (shared with the batch's other chunks)."""
    row_tokens: bytes = b""
    """Little-endian uint32, the tokens of each row (embeddings; empty for scores): what
    the results cache keeps beside a row, so a text served from it bills the same."""

    def array(self) -> npt.NDArray[np.float32]:
        flat = np.frombuffer(self.values, dtype="<f4")
        return flat.reshape(self.rows, self.dimensions) if self.dimensions > 1 else flat


class TokenizeChunk(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Texts to split into the model's tokens (TEI's ``/tokenize``): never truncated."""

    path: ClassVar[str] = "/internal/tokenize"

    request_id: str
    texts: list[str]
    timeout_ms: float
    model_version: str = ""
    add_special_tokens: bool = True


class DecodeChunk(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Token ids to turn back into text (TEI's ``/decode``)."""

    path: ClassVar[str] = "/internal/decode"

    request_id: str
    ids: list[list[int]]
    timeout_ms: float
    model_version: str = ""
    skip_special_tokens: bool = True


class Token(msgspec.Struct):
    """One token of a text, as TEI's ``SimpleToken``: its id, its text (the input's
    characters ``start:stop``; a special token's own form, with no span), whether special."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TokenizeResult(msgspec.Struct):
    model_version: str
    tokens: list[list[Token]]


class DecodeResult(msgspec.Struct):
    model_version: str
    texts: list[str]


def completed_texts(value: str | None) -> int | None:
    """The counter ``COMPLETED_HEADER`` carries; None when absent or not a count."""
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def with_budget(chunk: Chunk, timeout_ms: float) -> bytes:
    """The chunk's body as sent now, with ``timeout_ms`` left of its deadline."""
    return encode(msgspec.structs.replace(chunk, timeout_ms=timeout_ms))


encode = msgspec.msgpack.Encoder().encode
embed_decoder = msgspec.msgpack.Decoder(EmbedChunk)
score_decoder = msgspec.msgpack.Decoder(ScoreChunk)
result_decoder = msgspec.msgpack.Decoder(ChunkResult)
tokenize_decoder = msgspec.msgpack.Decoder(TokenizeChunk)
decode_decoder = msgspec.msgpack.Decoder(DecodeChunk)
tokenize_result_decoder = msgspec.msgpack.Decoder(TokenizeResult)
decode_result_decoder = msgspec.msgpack.Decoder(DecodeResult)
