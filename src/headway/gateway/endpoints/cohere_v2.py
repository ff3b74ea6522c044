"""``POST /v2/embed`` and ``POST /v2/rerank``, compatible with Cohere's v2 API.

``cohere.ClientV2(api_key=…, base_url=…)`` works unchanged (and LangChain's
``CohereRerank``, which is built on it). Answers are Cohere's: ``/v2/embed`` gives
``{id, embeddings: {<type>: rows}, texts, meta: {billed_units: {input_tokens}}}`` with
every ``embedding_types`` asked for (``cohere_types.py``; ``float`` when none is asked);
``/v2/rerank`` gives ``{id, results: [{index, relevance_score}], meta: {billed_units:
{search_units}}}``, most relevant first, scored as ``/v1/rerank`` scores. ``id`` is the
request id (``X-Request-Id``).

``model`` is required, as in Cohere's API. ``output_dimension`` asks for a narrower width
and ``max_tokens`` / ``max_tokens_per_doc`` for a token limit (``endpoints/fit.py``:
only what the model can give). ``input_type`` is required as Cohere requires it; it
chooses the model's prompt for that kind of text (``endpoints/prompts.py``: a model with
none embeds every type alike), and ``image`` (like ``images`` and ``inputs``, which are not
fields here) is refused. ``truncate`` ``END`` (the default) cuts a text over
the model's limit at its end, ``START`` at its start; ``NONE`` refuses it (422, saying how
many tokens were over). Errors are headway's
JSON, as on ``/v1/rerank`` (cohere-python keeps any error body as the exception's
``body``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headway import wire
from headway.errors import ValidationFailed
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.cohere_types import embeddings_by_type
from headway.gateway.endpoints.fit import Rows
from headway.gateway.endpoints.prompts import PromptAsk
from headway.gateway.endpoints.work import Asked, EmbedWork, RankWork, Scores
from headway.http.asgi import Response, json_response
from headway.protocols import compat as cohere
from headway.protocols.parse import check_texts, decode, whole_number
from headway.protocols.rerank import search_units, top_n_of
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings

COHERE_TRUNCATION: dict[str, wire.Truncation] = {"END": "right", "START": "left", "NONE": "none"}
"""Cohere's ``truncate``: where a text over the limit loses tokens; NONE refuses it."""
EMBED = Asked(width_field="output_dimension", token_field="max_tokens", other_kind="/v2/rerank")
RERANK = Asked(token_field="max_tokens_per_doc")


class CohereEmbed:
    route = "embeddings"

    def parse(self, body: bytes, limits: LimitsSettings) -> EmbedWork:
        parsed = decode(cohere.cohere_embed_decoder, body)
        check_texts(parsed.texts, limits, "texts")
        if parsed.input_type == "image":
            raise ValidationFailed(
                "`input_type` image: headway embeds texts; send search_document, "
                "search_query, classification or clustering"
            )
        answer = EmbedAnswer(parsed.texts, tuple(parsed.embedding_types or ("float",)))
        width = whole_number(parsed.output_dimension, "output_dimension")
        max_tokens = whole_number(parsed.max_tokens, "max_tokens")
        whole_number(parsed.priority, "priority")
        prompt = PromptAsk(input_type=parsed.input_type)
        truncation = COHERE_TRUNCATION[parsed.truncate or "END"]
        return EmbedWork(
            (parsed.model,),
            parsed.texts,
            None,
            answer,
            width,
            max_tokens,
            EMBED,
            prompt,
            truncation,
        )


@dataclass(frozen=True, slots=True)
class EmbedAnswer:
    texts: list[str]
    types: tuple[cohere.EmbeddingType, ...]

    def __call__(
        self, rows: Rows, tokens: int, ctx: RequestContext, record: ModelRecord
    ) -> Response:
        response = cohere.CohereEmbedResponse(
            id=ctx.request_id,
            embeddings=embeddings_by_type(rows, self.types),
            texts=self.texts,
            meta=cohere.CohereMeta(cohere.CohereBilledUnits(input_tokens=tokens)),
        )
        return json_response(response, headers={"x-model-version": record.version})


class CohereRerank:
    route = "rerank"

    def parse(self, body: bytes, limits: LimitsSettings) -> RankWork:
        parsed = decode(cohere.cohere_rerank_decoder, body)
        check_texts([parsed.query], limits, "query")
        check_texts(parsed.documents, limits, "documents")
        top_n = top_n_of(parsed.top_n)
        max_tokens = whole_number(parsed.max_tokens_per_doc, "max_tokens_per_doc")
        whole_number(parsed.priority, "priority")
        answer = rerank_answer
        return RankWork(
            (parsed.model,), parsed.query, parsed.documents, answer, top_n, max_tokens, RERANK
        )


def rerank_answer(
    scores: Scores,
    ranked: Sequence[int],
    tokens: int,
    ctx: RequestContext,
    record: ModelRecord,
) -> Response:
    results = [cohere.CohereRerankResult(i, float(scores[i])) for i in ranked]
    units = cohere.CohereBilledUnits(search_units=search_units(len(scores)))
    response = cohere.CohereRerankResponse(ctx.request_id, results, cohere.CohereMeta(units))
    return json_response(response, headers={"x-model-version": record.version})
