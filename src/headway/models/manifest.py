"""What an artifact is: the ``manifest.json`` stored beside ``model.onnx``.

The manifest is part of the hashed content, so two artifacts with the same
graph and tokenizer but different names are different versions. Fields added
later (``pooling``, ``normalize``, ``matryoshka_dimensions``, ``prompts``,
``default_prompt_name``, ``agreement``) are written only when they
differ from their defaults, so every artifact stored before them keeps its bytes and its
version.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from headway.models.agreement import Agreement
from headway.models.errors import ModelIntegrityError

ModelKind = Literal["embedding", "cross-encoder"]
Quantization = Literal["none", "int8"]
Pooling = Literal["none", "mean", "cls", "last"]
"""How the backend turns the graph's first output into one row per text: ``none``, the
output is that already (``[n, dim]``); ``mean`` / ``cls`` / ``last``, it is token
embeddings (``[n, seq, dim]``), averaged over the attention mask or taken at the first or
the last real token."""

_DEFAULTS: dict[str, object] = {
    "pooling": "none",
    "normalize": False,
    "matryoshka_dimensions": (),
    "prompts": (),
    "default_prompt_name": None,
    "agreement": None,
}


@dataclass(frozen=True, slots=True)
class ModelManifest:
    """Kind, shape and provenance of one artifact."""

    kind: ModelKind
    name: str
    dimensions: int
    max_tokens: int
    quantization: Quantization
    source: str
    pooling: Pooling = "none"
    normalize: bool = False
    """L2-normalise each row in the backend (graphs that do it themselves leave it off)."""
    matryoshka_dimensions: tuple[int, ...] = ()
    """Narrower widths the model was trained to be truncated to (Matryoshka representation
    learning), widest first: a request may ask for one (the gateway keeps that many of the
    first components and L2-normalises them again). Empty: only ``dimensions``."""
    prompts: tuple[tuple[str, str], ...] = ()
    """(name, text) pairs, sorted by name: the text put before an input that asks for the
    prompt (sentence-transformers' ``prompts``), stored as a JSON object."""
    default_prompt_name: str | None = None
    """The prompt an input that asks for none gets; None: no prompt."""
    agreement: Agreement | None = None
    """A derived version's (int8): how closely it agrees with its source. None: not one."""

    def to_json(self) -> str:
        """Canonical form: sorted keys, two-space indent, trailing newline; the later
        fields only where they are not at their defaults."""
        fields = {k: v for k, v in asdict(self).items() if k not in _DEFAULTS or _DEFAULTS[k] != v}
        if "prompts" in fields:
            fields["prompts"] = dict(self.prompts)
        return json.dumps(fields, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    def prompt(self, name: str | None) -> str:
        """The text before an input asking for prompt ``name`` (None: the default one)."""
        chosen = name if name is not None else self.default_prompt_name
        if chosen is None:
            return ""
        text = dict(self.prompts).get(chosen)
        if text is None:
            raise KeyError(chosen)
        return text

    @classmethod
    def from_json(cls, text: str) -> ModelManifest:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelIntegrityError(f"manifest is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ModelIntegrityError("manifest is not a JSON object")
        return cls(
            kind=_choice(raw, "kind", get_args(ModelKind)),
            name=_typed(raw, "name", str),
            dimensions=_positive(raw, "dimensions"),
            max_tokens=_positive(raw, "max_tokens"),
            quantization=_choice(raw, "quantization", get_args(Quantization)),
            source=_typed(raw, "source", str),
            pooling=_choice(raw, "pooling", get_args(Pooling), default="none"),
            normalize=_flag(raw, "normalize"),
            matryoshka_dimensions=matryoshka_widths(
                raw.get("matryoshka_dimensions", []), _positive(raw, "dimensions")
            ),
            prompts=_prompts(raw.get("prompts", {})),
            default_prompt_name=_default_prompt(raw),
            agreement=Agreement.from_json(raw["agreement"]) if "agreement" in raw else None,
        )


def matryoshka_widths(value: object, dimensions: int) -> tuple[int, ...]:
    """Narrower widths, checked: positive whole numbers below ``dimensions``, each once;
    widest first."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(w, int) and not isinstance(w, bool) and 0 < w < dimensions for w in value
    ):
        raise ModelIntegrityError(
            f"manifest field 'matryoshka_dimensions' must list whole numbers between 1 and "
            f"{dimensions - 1}, got {value!r}"
        )
    if len(set(value)) != len(value):
        raise ModelIntegrityError(
            f"manifest field 'matryoshka_dimensions' repeats a width: {value}"
        )
    return tuple(sorted(value, reverse=True))


def _prompts(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ModelIntegrityError(f"manifest field 'prompts' must map names to texts: {value!r}")
    return tuple(sorted(value.items()))


def _default_prompt(raw: dict[str, Any]) -> str | None:
    value = raw.get("default_prompt_name")
    if value is None:
        return None
    if not isinstance(value, str) or value not in raw.get("prompts", {}):
        raise ModelIntegrityError(f"manifest 'default_prompt_name' names no prompt: {value!r}")
    return value


def _typed(raw: dict[str, Any], key: str, kind: type[str]) -> str:
    value = raw.get(key)
    if not isinstance(value, kind):
        raise ModelIntegrityError(f"manifest field {key!r} must be a string, got {value!r}")
    return value


def _positive(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelIntegrityError(f"manifest field {key!r} must be a positive integer")
    return value


def _flag(raw: dict[str, Any], key: str) -> bool:
    value = raw.get(key, _DEFAULTS[key])
    if not isinstance(value, bool):
        raise ModelIntegrityError(f"manifest field {key!r} must be true or false, got {value!r}")
    return value


def _choice(raw: dict[str, Any], key: str, allowed: tuple[Any, ...], default: object = None) -> Any:
    value = raw.get(key, default)
    if value not in allowed:
        raise ModelIntegrityError(f"manifest field {key!r} must be one of {allowed}, got {value!r}")
    return value
