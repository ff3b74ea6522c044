"""``POST /v1/rerank``'s body (Cohere's v1), decoded strictly and checked against the
limits: what the gateway serves and what a batch line must be, in one place; and how
Cohere bills a search."""

from __future__ import annotations

from dataclasses import dataclass

from headway.errors import ValidationFailed
from headway.protocols import bodies
from headway.protocols.parse import check_texts, decode, whole_number
from headway.settings import LimitsSettings

DOCUMENTS_PER_SEARCH_UNIT = 100


def search_units(documents: int) -> int:
    """Cohere bills a search unit per query of up to 100 documents."""
    return -(-documents // DOCUMENTS_PER_SEARCH_UNIT)


def top_n_of(value: float | None) -> int | None:
    top_n = whole_number(value, "top_n")
    if top_n is not None and top_n < 1:
        raise ValidationFailed("`top_n` must be at least 1")
    return top_n


@dataclass(frozen=True, slots=True)
class RerankAsk:
    model: str | None
    """None: the gateway's default (the rerank alias, else the embedding model)."""
    query: str
    documents: list[str]
    return_documents: bool
    top_n: int | None


def parse_rerank(body: bytes, limits: LimitsSettings) -> RerankAsk:
    parsed = decode(bodies.rerank_decoder, body)
    documents = [doc if isinstance(doc, str) else doc.text for doc in parsed.documents]
    check_texts([parsed.query], limits, "query")
    check_texts(documents, limits, "documents")
    top_n = top_n_of(parsed.top_n)
    return RerankAsk(parsed.model, parsed.query, documents, parsed.return_documents, top_n)
