"""TEI's ``POST /tokenize`` and ``POST /decode``: the model's own tokenizer, asked of a
worker that serves the default embedding model (the one ``/embed`` serves).

Not model work: nothing is batched, admitted or metered, but each call is a tenant's (its
key), charged to its quota by texts (or id sequences) and bounded as ``/embed`` is (texts
per request, characters per text; ids per sequence by the same character bound), so a
tenant that tokenizes in a loop is limited as one that embeds in a loop. ``/tokenize``
never truncates (a caller asks to count what the model would cut) and puts the model's
``prompt_name`` before each input, as ``/embed`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import msgspec

from headway import wire
from headway.errors import NotFound, ValidationFailed
from headway.gateway.context import RequestContext
from headway.gateway.endpoints.prompts import PromptAsk, prompt_for
from headway.gateway.path import PathParts
from headway.gateway.stages.ask import ask
from headway.gateway.stages.authenticate import caller_of
from headway.gateway.stages.deadline import deadline_from_headers
from headway.gateway.stages.quota import QuotaCharge
from headway.http.asgi import Handler, Request, Response, json_response
from headway.protocols import compat as tei
from headway.protocols.parse import check_texts, decode
from headway.registry.model import ModelRecord

T = TypeVar("T")
MAX_TOKEN_ID = 2**31 - 1
"""No vocabulary is larger; the worker refuses ids beyond its own model's."""


def tokenize(parts: PathParts, default_models: Sequence[str]) -> Handler:
    async def handle(request: Request) -> Response:
        parsed = decode(tei.tei_tokenize_decoder, request.body)
        texts = [parsed.inputs] if isinstance(parsed.inputs, str) else parsed.inputs
        check_texts(texts, parts.settings.limits, "inputs")
        ctx, record = _context(request, parts, default_models)
        prompt = prompt_for(PromptAsk(name=parsed.prompt_name), record)
        chunk = wire.TokenizeChunk(
            request.id,
            [prompt + text for text in texts],
            0.0,
            record.version,
            parsed.add_special_tokens,
        )
        answer = await _charged(parts, ctx, record, chunk, wire.tokenize_result_decoder, len(texts))
        return json_response(answer.tokens, headers={"x-model-version": answer.model_version})

    return handle


def decode_ids(parts: PathParts, default_models: Sequence[str]) -> Handler:
    async def handle(request: Request) -> Response:
        parsed = decode(tei.tei_decode_decoder, request.body)
        rows = _rows(parsed.ids)
        limits = parts.settings.limits
        if not rows or len(rows) > limits.max_texts:
            raise ValidationFailed(f"`ids` must hold 1 to {limits.max_texts} sequences")
        if any(len(row) > limits.max_chars for row in rows):
            raise ValidationFailed(f"a sequence of `ids` holds more than {limits.max_chars} ids")
        if any(not 0 <= i <= MAX_TOKEN_ID for row in rows for i in row):
            raise ValidationFailed(f"token ids are from 0 to {MAX_TOKEN_ID}")
        ctx, record = _context(request, parts, default_models)
        chunk = wire.DecodeChunk(request.id, rows, 0.0, record.version, parsed.skip_special_tokens)
        answer = await _charged(parts, ctx, record, chunk, wire.decode_result_decoder, len(rows))
        return json_response(answer.texts, headers={"x-model-version": answer.model_version})

    return handle


async def _charged(
    parts: PathParts,
    ctx: RequestContext,
    record: ModelRecord,
    chunk: wire.TokenizeChunk | wire.DecodeChunk,
    decoder: msgspec.msgpack.Decoder[T],
    units: int,
) -> T:
    """``chunk`` asked of a replica serving ``record``, ``units`` charged to the tenant."""
    pool = parts.pools.serving(record)
    async with QuotaCharge(parts.quota, ctx, units, parts.empty_buckets):
        return await ask(pool, record.version, chunk, decoder, ctx.deadline, units)


def _rows(ids: list[int | float | list[int | float]]) -> list[list[int]]:
    flat = [i for i in ids if not isinstance(i, list)]
    if len(flat) == len(ids):
        return [_whole(flat)] if flat else []
    rows = [row for row in ids if isinstance(row, list)]
    if len(rows) == len(ids):
        return [_whole(row) for row in rows]
    raise ValidationFailed("`ids` must be one sequence of token ids or a list of them")


def _whole(row: Sequence[int | float]) -> list[int]:
    if not all(isinstance(i, int) or i.is_integer() for i in row):
        raise ValidationFailed("token ids are whole numbers")
    return [int(i) for i in row]


def _context(
    request: Request, parts: PathParts, default_models: Sequence[str]
) -> tuple[RequestContext, ModelRecord]:
    caller = caller_of(request)
    tenant = caller.tenant
    request.tenant = tenant.name
    settings = parts.settings
    timeouts = settings.interactive if tenant.tier == "interactive" else settings.batch
    deadline = deadline_from_headers(request.headers, timeouts, parts.clock)
    ctx = RequestContext(request.id, "tokenize", tenant, deadline, request.response_headers)
    snapshot = parts.snapshots.current
    for name in default_models:
        record = snapshot.resolve_model(name)
        if record is not None:
            return ctx, record
    raise NotFound(f"model {default_models[-1]!r} does not exist")
