"""Which of a model's prompts a request gets: the text put before each of its inputs.

A model's prompts come from its folder (sentence-transformers' ``prompts`` and
``default_prompt_name``) through its manifest into its registry record. A request asks:

- TEI ``/embed``, ``prompt_name``: that prompt; a name the model lacks is refused;
- Cohere ``/v2/embed``, ``input_type``: the first of ``INPUT_TYPE_PROMPTS[input_type]``
  the model has, else its default prompt;
- OpenAI ``/v1/embeddings`` and the Batch API (no such field): the default prompt.

No prompt at all (the model has none, or no default and none matched): the inputs as
they are. sentence-transformers puts a prompt before the text the same way, so the
vectors are its own; the prompt's tokens are counted and billed as the input's.
"""

from __future__ import annotations

from dataclasses import dataclass

from headway.errors import ValidationFailed
from headway.registry.model import ModelRecord

INPUT_TYPE_PROMPTS: dict[str, tuple[str, ...]] = {
    "search_query": ("search_query", "query"),
    "search_document": ("search_document", "document", "passage", "corpus"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}
"""Cohere's input types, each with the prompt names models use for it, tried in order
(E5 says ``query`` and ``passage``, sentence-transformers' own ``query`` and ``document``)."""


@dataclass(frozen=True, slots=True)
class PromptAsk:
    name: str | None = None
    """A prompt named outright: the model must have it."""
    input_type: str | None = None
    """A kind of input (Cohere's): the model's prompt for it, if it has one."""


DEFAULT = PromptAsk()


def prompt_for(ask: PromptAsk, record: ModelRecord, field: str = "prompt_name") -> str:
    """The text before each input of a request that ``ask``s, for the model ``record``."""
    prompts = dict(record.prompts)
    if ask.name is not None:
        text = prompts.get(ask.name)
        if text is None:
            has = f"it has {', '.join(sorted(prompts))}" if prompts else "it has none"
            raise ValidationFailed(
                f"`{field}` {ask.name[:40]!r}: model {record.name!r} has no such prompt ({has})"
            )
        return text
    for name in INPUT_TYPE_PROMPTS.get(ask.input_type or "", ()):
        if name in prompts:
            return prompts[name]
    return prompts.get(record.default_prompt_name or "", "")
