"""A trace becomes a plan (replay), and a plan a trace (record).

**Replay** (``plan_trace``): each line becomes one request at its offset ÷ ``speed``
(a run at speed 2 offers the same requests in half the time; deadlines stay as
recorded, since they are the callers' contract, not the trace's pace). Its tenant's
API key comes from a mapping the caller gives: a trace never holds keys. Texts are
written from the recorded lengths with the corpus words, from one seeded RNG, and
numbered like the synthetic workload's (``workload.numbered_text``) so that none
repeats within the run and a cache keyed on text content never hits.

**Record** (``trace_of``): the trace of what a plan sends, its offsets as sent (a
replay at speed 2, recorded, holds the halved offsets) and each text's length in
words read back from the request's body, so any workload can be recorded, not only
those that say their lengths. Replaying a recording offers the same load: the same
offsets, tenants, classes, texts and lengths (the texts themselves are new). Recorded
lengths are the lengths sent; a synthetic workload numbers its texts with at least as
many words as a replay of the same requests needs, so lengths survive a round trip.
"""

from __future__ import annotations

import json
import math
import random
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.plan import Plan, TimedRequest
from headway_tools.loadgen.trace import DEFAULT_QUERY_WORDS, ENDPOINTS, Trace, TraceRequest
from headway_tools.loadgen.workload import DEFAULT_MODEL, numbered_text, serial_words

REPLAY_ARRIVALS = "replay"
_ENDPOINT_OF_PATH = {path: endpoint for endpoint, path in ENDPOINTS.items()}


class _Embeddings(msgspec.Struct):
    model: str
    input: list[str]


class _Rerank(msgspec.Struct):
    query: str
    documents: list[str]
    model: str = DEFAULT_MODEL


def plan_trace(
    trace: Trace,
    keys: Mapping[str, str],
    *,
    speed: float = 1.0,
    seed: int = 0,
    model: str | None = None,
) -> Plan:
    """``trace``'s requests, sped up by ``speed``; ``model`` (when given) replaces its models."""
    if not (math.isfinite(speed) and speed > 0):
        raise InvalidSpec(f"speed must be a positive number, not {speed}")
    missing = sorted({r.tenant for r in trace.requests} - set(keys))
    if missing:
        raise InvalidSpec(
            f"no API key for tenant {', '.join(map(repr, missing))}: give --key TENANT=KEY"
        )
    rng = random.Random(f"headway.loadgen.replay:{seed}")
    digits = serial_words(sum(r.texts + (r.endpoint == "rerank") for r in trace.requests))
    classes: dict[str, int] = {}
    requests = []
    serial = 0
    for line in trace.requests:
        texts = []
        for length in line.lengths:
            texts.append(numbered_text(serial, length, digits, rng))
            serial += 1
        sent_model = model or line.model
        if line.endpoint == "rerank":
            query = numbered_text(serial, line.query_words, digits, rng)
            serial += 1
            body = msgspec.json.encode(_Rerank(query, texts, sent_model))
        else:
            body = msgspec.json.encode(_Embeddings(sent_model, texts))
        requests.append(
            TimedRequest(
                offset_s=line.offset_s / speed,
                class_index=classes.setdefault(line.label, len(classes)),
                tenant=line.tenant,
                key=keys[line.tenant],
                path=ENDPOINTS[line.endpoint],
                timeout_ms=line.timeout_ms,
                texts=line.texts,
                body=body,
            )
        )
    return Plan(tuple(classes), requests, trace.duration_s / speed, REPLAY_ARRIVALS)


def trace_of(plan: Plan) -> Trace:
    """What ``plan`` sends, as a trace (no keys, no texts: their lengths in words)."""
    return Trace(
        tuple(_line(plan, i, request) for i, request in enumerate(plan.requests)),
        plan.duration_s,
    )


def _line(plan: Plan, i: int, request: TimedRequest) -> TraceRequest:
    endpoint = _ENDPOINT_OF_PATH.get(request.path)
    if endpoint is None:
        raise InvalidSpec(
            f"request {i}: cannot record a request to {request.path}"
            f" (a trace holds {', '.join(ENDPOINTS.values())} requests)"
        )
    try:
        if endpoint == "rerank":
            rerank = msgspec.json.decode(request.body, type=_Rerank)
            model, texts = rerank.model, rerank.documents
            query_words = len(rerank.query.split())
        else:
            embeddings = msgspec.json.decode(request.body, type=_Embeddings)
            model, texts, query_words = embeddings.model, embeddings.input, DEFAULT_QUERY_WORDS
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidSpec(f"request {i}: cannot record its body: {exc}") from exc
    lengths = tuple(len(text.split()) for text in texts)
    if not lengths or not all(lengths) or not query_words:
        raise InvalidSpec(f"request {i}: a trace holds one or more texts of one or more words")
    try:
        return TraceRequest(
            offset_s=request.offset_s,
            tenant=request.tenant,
            lengths=lengths,
            timeout_ms=request.timeout_ms,
            endpoint=endpoint,
            model=model,
            class_name=plan.class_names[request.class_index],
            query_words=query_words,
        )
    except InvalidSpec as exc:
        raise InvalidSpec(f"request {i}: {exc}") from exc


def parse_keys(pairs: Sequence[str]) -> dict[str, str]:
    """``["search-app=demo-key-search-app", ...]`` → tenant → API key."""
    keys: dict[str, str] = {}
    for pair in pairs:
        tenant, sep, key = pair.partition("=")
        if not (sep and tenant and key):
            raise InvalidSpec(f"--key: expected TENANT=KEY, not {pair!r}")
        if keys.get(tenant, key) != key:
            raise InvalidSpec(f"--key: tenant {tenant!r} is given two keys")
        keys[tenant] = key
    return keys


def load_keys(path: Path) -> dict[str, str]:
    """A tenant → API key table: JSON when the file ends in ``.json``, TOML otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        table = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise InvalidSpec(f"{path}: cannot read: {exc}") from exc
    except ValueError as exc:  # tomllib.TOMLDecodeError is one
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise InvalidSpec(f"{path}: not valid {kind}: {exc}") from exc
    if not isinstance(table, dict):
        raise InvalidSpec(f'{path}: expected a table of tenant = "key"')
    for tenant, key in table.items():
        if not isinstance(key, str) or not key:
            raise InvalidSpec(f"{path}: {tenant}: expected an API key string, not {key!r}")
    return dict(table)
