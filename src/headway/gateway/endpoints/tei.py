"""TEI's protocol (Hugging Face text-embeddings-inference), for its clients as they are.

TEI serves one model and its bodies name none: ``POST /embed`` and ``POST /`` (where
``huggingface_hub``'s ``InferenceClient(base_url=…).feature_extraction`` posts) embed with the
default embedding model (``embed_models``, the first the registry knows), ``POST /rerank`` is
``/v1/rerank`` without a ``model``, and ``GET /info`` describes the ``/embed`` model. The key is
the bearer key of every route (TEI's ``--api-key`` sends it so), and each request takes the path
of ``/v1/embeddings`` (``endpoints/work.py``).

``truncate: false`` refuses a text over the model's limit (422, saying how many tokens
were over), ``truncation_direction: Left`` cuts it at its start. What TEI offers and
headway cannot do is refused with what to send instead, never ignored: a ``prompt_name``
the model lacks, ``normalize: false`` (a model may normalise inside its graph, so the rows
as pooled are not there to give), token ids as ``inputs``. ``normalize: true`` gives
unit-length rows: as computed where they already are (so they equal ``/v1/embeddings``'),
scaled where they are not.

Errors are TEI's body and ``ErrorType`` (as serde writes it) at headway's status (``errors.py``):
a refused request is ``Validation``, a full pool or an empty quota ``Overloaded``, no ready
replica or no usage outbox ``Unhealthy``, any other failure of ours ``Backend``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from headway import __version__, wire
from headway.errors import HeadwayError, NotFound, Overloaded, QuotaExceeded, ValidationFailed
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.fit import Rows
from headway.gateway.endpoints.prompts import PromptAsk
from headway.gateway.endpoints.work import Asked, EmbedWork, RankWork, Scores
from headway.gateway.pools import Pools
from headway.gateway.snapshots import Snapshots
from headway.http.asgi import Handler, Request, Response, error_response, json_response
from headway.protocols import compat as tei
from headway.protocols.parse import check_texts, decode, texts_of, whole_number
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

ASKED = Asked(other_kind="/rerank")
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_UNIT_TOLERANCE = 1e-4
"""A row whose length is this close to 1 is already unit-length (float32 rounding)."""


def tei_error(exc: HeadwayError) -> Response:
    """``exc`` in TEI's error format, with headway's status and headers."""
    return error_response(exc, tei.TeiError(exc.message, error_type(exc)))


def error_type(exc: HeadwayError) -> tei.TeiErrorType:
    if isinstance(exc, QuotaExceeded | Overloaded):
        return "Overloaded"
    if exc.status == 503:
        return "Unhealthy"
    if exc.status >= 500:
        return "Backend"
    return "Validation"


def truncation_of(truncate: bool | None, direction: str) -> wire.Truncation:
    """TEI's ``truncate`` (false: refuse a text over the limit) and ``truncation_direction``
    (which end loses tokens)."""
    if truncate is False:
        return "none"
    return "left" if direction.lower() == "left" else "right"


class TeiEmbed:
    route = "embeddings"

    def __init__(self, default_models: Sequence[str]) -> None:
        self.default_models = tuple(default_models)

    def parse(self, body: bytes, limits: LimitsSettings) -> EmbedWork:
        parsed = decode(tei.tei_embed_decoder, body)
        inputs = texts_of(parsed.inputs, "inputs")
        check_texts(inputs, limits, "inputs")
        truncation = truncation_of(parsed.truncate, parsed.truncation_direction)
        if not parsed.normalize:
            raise ValidationFailed(
                "`normalize: false` is not served: headway's models may normalise inside "
                "their graph, so rows as pooled are not there to give; omit it"
            )
        width = whole_number(parsed.dimensions, "dimensions")
        prompt = PromptAsk(name=parsed.prompt_name)
        return EmbedWork(
            self.default_models, inputs, None, embed_answer, width, None, ASKED, prompt, truncation
        )


def unit_rows(rows: Rows) -> Rows:
    """``rows`` with every row of length 1: as they are where they already are (so they
    equal the native route's), scaled where they are not (a zero row stays zero)."""
    norms = np.linalg.norm(rows, axis=1)
    off = np.abs(norms - 1.0) > _UNIT_TOLERANCE
    if not off.any():
        return rows
    scaled = rows.copy()
    scaled[off] /= np.maximum(norms[off], np.finfo(np.float32).tiny)[:, None]
    return scaled


def embed_answer(rows: Rows, tokens: int, ctx: RequestContext, record: ModelRecord) -> Response:
    """TEI's ``EmbedResponse``: the rows as a JSON array of arrays of float32 values."""
    body = orjson.dumps(unit_rows(rows), option=_NUMPY)
    return Response(body, headers={"x-model-version": record.version})


class TeiRerank:
    route = "rerank"

    def __init__(self, default_models: Sequence[str]) -> None:
        self.default_models = tuple(default_models)

    def parse(self, body: bytes, limits: LimitsSettings) -> RankWork:
        parsed = decode(tei.tei_rerank_decoder, body)
        check_texts([parsed.query], limits, "query")
        check_texts(parsed.texts, limits, "texts")
        truncation = truncation_of(parsed.truncate, parsed.truncation_direction)
        texts = parsed.texts if parsed.return_text else None
        answer = RankAnswer(texts, parsed.raw_scores)
        return RankWork(
            self.default_models,
            parsed.query,
            parsed.texts,
            answer,
            asked=ASKED,
            truncation=truncation,
        )


def raw_scores(scores: Scores, record: ModelRecord) -> Scores:
    """The model's own scores behind the [0, 1] ones: a cross-encoder's logit (its score is
    the logit's sigmoid; inverted in float64, exact to float32 within |logit| < ~16, past
    which float32 has no room for the sigmoid's distance from 0 or 1), an embedding model's
    cosine (its score is ``(cosine + 1) / 2``)."""
    if record.kind == "cross-encoder":
        eps = float(np.finfo(np.float32).eps) / 2
        p = np.clip(scores.astype(np.float64), eps, 1 - eps)
        return (np.log(p) - np.log1p(-p)).astype(np.float32)
    return (scores.astype(np.float64) * 2 - 1).astype(np.float32)


@dataclass(frozen=True, slots=True)
class RankAnswer:
    texts: list[str] | None
    """Returned beside each rank (``return_text``), else None."""
    raw: bool

    def __call__(
        self,
        scores: Scores,
        ranked: Sequence[int],
        tokens: int,
        ctx: RequestContext,
        record: ModelRecord,
    ) -> Response:
        shown = raw_scores(scores, record) if self.raw else scores
        texts = self.texts
        ranks = [
            tei.TeiRank(i, float(shown[i]), texts[i] if texts is not None else None) for i in ranked
        ]
        return json_response(ranks, headers={"x-model-version": record.version})


@dataclass(frozen=True, slots=True)
class InfoParts:
    snapshots: Snapshots
    pools: Pools
    default_models: tuple[str, ...]
    limits: LimitsSettings


def info(parts: InfoParts) -> Handler:
    """``GET /info`` (any valid key, as TEI with ``--api-key``): the model ``/embed`` serves,
    in TEI's fields. headway's own limits stand where TEI's have no counterpart: texts per
    request for ``max_client_batch_size``, the pool's admission limit (texts) for
    ``max_concurrent_requests``, the most tokens one request can carry for
    ``max_batch_tokens``; ``tokenization_workers`` is 0 (the workers tokenize, not this
    gateway); an embedding model's pooling is given as ``mean`` (sentence-transformers'
    default, the default model's)."""

    async def handle(request: Request) -> Response:
        snapshot = parts.snapshots.current  # the key was checked by the edge (auth any_key)
        found = [
            (name, record)
            for name in parts.default_models
            if (record := snapshot.resolve_model(name)) is not None
        ]
        if not found:
            raise NotFound(f"model {parts.default_models[-1]!r} does not exist")
        name, record = found[0]
        pool = parts.pools.for_record(record)
        per_text = record.max_tokens
        model_type = (
            tei.TeiModelType(embedding=tei.TeiEmbeddingModel("mean"))
            if record.kind == "embedding"
            else tei.TeiModelType(reranker=tei.TeiClassifierModel({"0": "LABEL_0"}, {"LABEL_0": 0}))
        )
        described = tei.TeiInfo(
            model_id=name,
            model_sha=record.version,
            model_dtype="float32" if record.quantization == "none" else record.quantization,
            model_type=model_type,
            max_concurrent_requests=pool.admission.limit if pool is not None else 0,
            max_input_length=per_text,
            max_batch_tokens=per_text * parts.limits.max_texts,
            max_batch_requests=None,
            max_client_batch_size=parts.limits.max_texts,
            auto_truncate=True,
            tokenization_workers=0,
            version=__version__,
            served_model_name=name,
        )
        return json_response(described)

    return handle
