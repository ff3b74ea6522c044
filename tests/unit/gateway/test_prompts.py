"""Which prompt a request gets: by name (strict), by input type (lenient), else the default."""

from __future__ import annotations

import pytest

from headway.errors import ValidationFailed
from headway.gateway.endpoints.prompts import INPUT_TYPE_PROMPTS, PromptAsk, prompt_for
from headway.registry.model import ModelRecord

E5 = ModelRecord(
    "e" * 64, "e5", "embedding", 8, "none", prompts=(("passage", "passage: "), ("query", "query: "))
)
BGE = ModelRecord(
    "b" * 64,
    "bge",
    "embedding",
    8,
    "none",
    prompts=(("query", "Represent this sentence for searching relevant passages: "),),
    default_prompt_name="query",
)
PLAIN = ModelRecord("p" * 64, "plain", "embedding", 8, "none")


@pytest.mark.parametrize(
    ("ask", "record", "prompt"),
    [
        (PromptAsk(), E5, ""),  # no default: the text as it is
        (PromptAsk(input_type="search_query"), E5, "query: "),
        (PromptAsk(input_type="search_document"), E5, "passage: "),
        (PromptAsk(input_type="clustering"), E5, ""),  # none for it, and no default
        (PromptAsk(name="passage"), E5, "passage: "),
        (PromptAsk(), BGE, "Represent this sentence for searching relevant passages: "),
        (
            PromptAsk(input_type="search_document"),
            BGE,
            "Represent this sentence for searching relevant passages: ",
        ),
        (PromptAsk(input_type="search_query"), PLAIN, ""),
    ],
)
def test_the_prompt_a_request_gets(ask: PromptAsk, record: ModelRecord, prompt: str) -> None:
    assert prompt_for(ask, record) == prompt


def test_a_prompt_named_that_the_model_lacks_is_refused_naming_those_it_has() -> None:
    with pytest.raises(
        ValidationFailed, match=r"'query2'.*'e5' has no such prompt \(it has passage, query\)"
    ):
        prompt_for(PromptAsk(name="query2"), E5)
    with pytest.raises(ValidationFailed, match="it has none"):
        prompt_for(PromptAsk(name="query"), PLAIN)


def test_every_cohere_input_type_but_image_has_its_names() -> None:
    from typing import get_args

    from headway.protocols.compat import InputType

    assert set(INPUT_TYPE_PROMPTS) == set(get_args(InputType)) - {"image"}
