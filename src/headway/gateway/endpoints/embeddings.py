"""``POST /v1/embeddings``, OpenAI-compatible.

``input`` is a text or a list of texts; token ids (an array of integers, or a batch of
them, which OpenAI's API takes and LangChain's ``OpenAIEmbeddings`` sends by default) are
refused with a 422 that says what to change. ``dimensions`` asks for a narrower width
(``endpoints/fit.py``: only one the model was trained for).

Float rows are written by orjson straight from the float32 array, each number the
shortest decimal that reads back as the same float32 (what the model computed, no
more digits): ~2.5x faster than handing msgspec Python floats, and ~40% fewer bytes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import msgspec
import orjson

from headway.gateway import schemas
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.fit import Rows
from headway.gateway.endpoints.work import EmbedWork
from headway.gateway.stages.parse import check_texts, decode, texts_of, whole_number
from headway.http.asgi import Response, json_response
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
LANGCHAIN_FIX = (
    " (LangChain's OpenAIEmbeddings tokenizes with tiktoken and sends ids unless it is"
    " constructed with check_embedding_ctx_length=False.)"
)


class Embeddings:
    route = "embeddings"

    def parse(self, body: bytes, limits: LimitsSettings) -> EmbedWork:
        parsed = decode(schemas.embeddings_decoder, body)
        inputs = texts_of(parsed.input, "input", LANGCHAIN_FIX)
        check_texts(inputs, limits, "input")
        answer = OpenAIAnswer(parsed.model, parsed.encoding_format == "base64")
        width = whole_number(parsed.dimensions, "dimensions")
        return EmbedWork((parsed.model,), inputs, parsed.user, answer, width)


@dataclass(frozen=True, slots=True)
class OpenAIAnswer:
    model: str
    """As the client named it."""
    base64: bool

    def __call__(
        self, rows: Rows, tokens: int, ctx: RequestContext, record: ModelRecord
    ) -> Response:
        data: list[schemas.Embedding]
        if self.base64:
            data = [
                schemas.Embedding(i, base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
                for i, row in enumerate(rows)
            ]
        else:
            data = [
                schemas.Embedding(i, msgspec.Raw(orjson.dumps(row, option=_NUMPY)))
                for i, row in enumerate(rows)
            ]
        response = schemas.EmbeddingsResponse(
            data=data, model=self.model, usage=schemas.EmbeddingsUsage(tokens, tokens)
        )
        return json_response(response, headers={"x-model-version": record.version})
