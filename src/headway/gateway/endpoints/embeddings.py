"""``POST /v1/embeddings``, OpenAI-compatible: the body as ``protocols/embeddings.py``
reads it, turned into work; ``dimensions`` asks for a narrower width
(``endpoints/fit.py``: only one the model was trained for).

Float rows are written by orjson straight from the float32 array, each number the
shortest decimal that reads back as the same float32 (what the model computed, no
more digits), with no Python float made (docs/benchmarks.md#figures-the-design-rests-on).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import msgspec
import orjson

from headway.gateway.context import RequestContext
from headway.gateway.endpoints.fit import Rows
from headway.gateway.endpoints.work import EmbedWork
from headway.http.asgi import Response, json_response
from headway.protocols import bodies
from headway.protocols.embeddings import parse_embeddings
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


class Embeddings:
    route = "embeddings"

    def parse(self, body: bytes, limits: LimitsSettings) -> EmbedWork:
        ask = parse_embeddings(body, limits)
        answer = OpenAIAnswer(ask.model, ask.base64)
        return EmbedWork((ask.model,), ask.inputs, ask.user, answer, ask.width)


@dataclass(frozen=True, slots=True)
class OpenAIAnswer:
    model: str
    """As the client named it."""
    base64: bool

    def __call__(
        self, rows: Rows, tokens: int, ctx: RequestContext, record: ModelRecord
    ) -> Response:
        data: list[bodies.Embedding]
        if self.base64:
            data = [
                bodies.Embedding(i, base64.b64encode(row.astype("<f4").tobytes()).decode("ascii"))
                for i, row in enumerate(rows)
            ]
        else:
            data = [
                bodies.Embedding(i, msgspec.Raw(orjson.dumps(row, option=_NUMPY)))
                for i, row in enumerate(rows)
            ]
        response = bodies.EmbeddingsResponse(
            data=data, model=self.model, usage=bodies.EmbeddingsUsage(tokens, tokens)
        )
        return json_response(response, headers={"x-model-version": record.version})
