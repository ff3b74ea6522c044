"""Every protocol's body parser (``gateway/endpoints``: OpenAI, Cohere v1 and v2, TEI) on
whatever JSON a client sends: the work it asks for, or a client's error naming what is
wrong (400, 404 for a model it names that is not served, 422), never another exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from headway.gateway.endpoints.base import Endpoint
from headway.gateway.endpoints.cohere_v2 import CohereEmbed, CohereRerank
from headway.gateway.endpoints.embeddings import Embeddings
from headway.gateway.endpoints.rerank import Rerank
from headway.gateway.endpoints.tei import TeiEmbed, TeiRerank
from headway.settings import LimitsSettings
from tests import hostile

LIMITS = LimitsSettings(max_texts=8, max_chars=50)
ENDPOINTS: dict[str, Endpoint] = {
    "openai embeddings": Embeddings(),
    "cohere v1 rerank": Rerank(("rerank", "synthetic")),
    "cohere v2 embed": CohereEmbed(),
    "cohere v2 rerank": CohereRerank(),
    "tei embed": TeiEmbed(("synthetic",)),
    "tei rerank": TeiRerank(("rerank",)),
}
FIELDS = (
    "model",
    "input",
    "inputs",
    "texts",
    "query",
    "documents",
    "top_n",
    "dimensions",
    "encoding_format",
    "user",
    "input_type",
    "embedding_types",
    "truncate",
    "max_tokens",
    "max_tokens_per_doc",
    "output_dimension",
    "priority",
    "return_documents",
    "raw_scores",
    "return_text",
    "normalize",
    "prompt_name",
    "truncation_direction",
    "text",
)


@settings(hostile.FIXED, max_examples=100)
@given(
    st.one_of(hostile.json_documents(FIELDS), hostile.json_bodies(FIELDS)),
    st.sampled_from(sorted(ENDPOINTS)),
)
def test_any_body_is_work_or_a_client_error(body: bytes, endpoint: str) -> None:
    hostile.value_or_client_error(lambda: ENDPOINTS[endpoint].parse(body, LIMITS))
