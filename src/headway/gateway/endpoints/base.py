"""The two seams an endpoint fills in on the request path (``gateway/path.py``).

An ``Endpoint`` turns a body into a ``ModelRequest``; the request then names the
models that may serve it (in order of preference), counts its texts, cuts itself
into wire chunks, checks that the resolved model fits it, and shapes the answer
from the merged results. Everything else on the path is the same for every
endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from headway import wire
from headway.gateway.context import RequestContext
from headway.gateway.stages.merge import Merged
from headway.gateway.stages.plan import ChunkHeader
from headway.http.asgi import Response
from headway.registry.model import ModelRecord
from headway.settings import LimitsSettings


class ModelRequest(Protocol):
    @property
    def models(self) -> Sequence[str]:
        """Model names (aliases or versions) to try, the first the registry knows wins."""

    @property
    def user(self) -> str | None:
        """The caller's own end user, if the request names one (a sticky split's key)."""

    @property
    def texts(self) -> int:
        """The units it is charged, admitted and split by: inputs, or documents."""

    @property
    def cache_texts(self) -> Sequence[str] | None:
        """The texts its rows are cached by (``stages/cache.py``); None: not cached."""

    def only(self, indices: Sequence[int]) -> ModelRequest:
        """The same request for just these texts, in this order (the cache's misses)."""

    def for_model(self, record: ModelRecord) -> ModelRequest:
        """This request as the resolved model serves it (an embedding request's inputs
        behind the model's prompt); ``ValidationFailed`` if the model cannot."""

    def chunk(self, part: slice, header: ChunkHeader) -> wire.Chunk: ...

    def respond(self, merged: Merged, ctx: RequestContext, record: ModelRecord) -> Response: ...


class Endpoint(Protocol):
    @property
    def route(self) -> str:
        """The kind of work, ``embeddings`` or ``rerank``: the model metrics' route label,
        the usage event's endpoint, and which pool the precheck asks. Routes that ask for
        the same work in other words (Cohere v2's, TEI's, a batch line) share it; the edge
        counts each route by its own name."""

    def parse(self, body: bytes, limits: LimitsSettings) -> ModelRequest: ...
