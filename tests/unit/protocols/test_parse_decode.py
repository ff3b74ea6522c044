"""Every JSON body a client sends meets ``stages/parse.decode``: whatever its bytes, however
deep its nesting, and however deep the stack it is decoded on, the answer is the body's
value or a client's error (400 for what is not JSON or nests past the decoder's stack,
422 for the wrong shape), never the decoder's ``RecursionError`` as a 500."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.control.admin.splits import SplitBody
from headway.control.admin.tenants import TenantCreate
from headway.control.batches import schemas as batch_schemas
from headway.errors import HeadwayError, InvalidRequest, ValidationFailed
from headway.protocols import bodies as public
from headway.protocols import compat
from headway.protocols.parse import decode, decode_stored
from tests import hostile

DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "embeddings": public.embeddings_decoder,
    "rerank": public.rerank_decoder,
    "cohere embed": compat.cohere_embed_decoder,
    "cohere rerank": compat.cohere_rerank_decoder,
    "tei embed": compat.tei_embed_decoder,
    "tei rerank": compat.tei_rerank_decoder,
    "batch": batch_schemas.batch_create_decoder,
    "tenant": msgspec.json.Decoder(TenantCreate),
    "split": msgspec.json.Decoder(SplitBody),
}
FIELDS = ("input", "inputs", "texts", "documents", "query", "metadata", "weights", "pins")
bodies = st.one_of(hostile.json_bodies(FIELDS), st.binary(max_size=80))


def at_depth(frames: int, call: Any) -> Any:
    """``call()`` from ``frames`` calls down: a stack already deep, as in a busy thread."""
    return call() if frames <= 0 else at_depth(frames - 1, call)


@settings(hostile.FIXED, max_examples=60)
@given(bodies, st.sampled_from(sorted(DECODERS)))
def test_any_body_is_its_value_or_a_client_error(body: bytes, decoder: str) -> None:
    hostile.value_or_client_error(lambda: decode(DECODERS[decoder], body))


@settings(hostile.FIXED, max_examples=30)
@given(hostile.nested_json(), st.integers(0, sys.getrecursionlimit() - 200))
def test_however_deep_the_stack_a_nested_body_is_a_client_error_not_a_crash(
    body: bytes, frames: int
) -> None:
    wrapped = b'{"query": "q", "documents": [{"text": "a", "x": %s}]}' % body
    at_depth(
        frames,
        lambda: hostile.value_or_client_error(lambda: decode(public.rerank_decoder, wrapped)),
    )


def test_a_body_nested_past_the_decoders_stack_says_so() -> None:
    nested = b"[" * 5_000 + b"]" * 5_000
    with pytest.raises(InvalidRequest, match="nested too deeply"):
        decode(public.rerank_decoder, b'{"query": "q", "documents": [{"x": %s}]}' % nested)


def outcome(call: Any) -> Any:
    read = hostile.value_or_client_error(call)
    return (type(read), read.message) if isinstance(read, HeadwayError) else read


@hostile.FIXED
@given(hostile.json_documents(("name", "input_file_id", "metadata")), st.booleans())
def test_a_stored_body_holding_a_nul_is_a_422_and_any_other_reads_as_decode_reads_it(
    document: bytes, with_nul: bool
) -> None:
    body = b'{"x\\u0000": 1, "rest": %s}' % document if with_nul else document
    decoder = msgspec.json.Decoder(dict[str, Any])
    stored, decoded = (
        outcome(lambda: decode_stored(decoder, body)),
        outcome(lambda: decode(decoder, body)),
    )
    nul = b"\\u0000" in body.replace(b"\\\\", b"")  # an escape, not an escaped backslash
    if nul and not isinstance(decoded, tuple):
        assert stored[0] is ValidationFailed and "NUL" in stored[1]
    else:
        assert stored == decoded  # the decoder's refusal first, or the value
