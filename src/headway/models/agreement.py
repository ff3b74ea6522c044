"""How closely a derived version (an int8 quantization, say) agrees with its source, on a
fixed set of reference texts: what its manifest records, and what a rollout checks
before it promotes the variant (``rollouts/gate.py``).

The figures are rounded to 4 decimals before they are written: they are part of the
manifest, so of the version's hash, and ONNX Runtime's kernels differ in the last bits of
a float from one CPU to another; rounded, the same variant gets the same version on
(almost) every machine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from headway.models.backend import Backend
from headway.models.errors import ModelIntegrityError
from headway.models.evaluate import compare_models

REFERENCE_TEXTS: tuple[str, ...] = (
    "How do I reset my password?",
    "I forgot my password and need to change it.",
    "The cat sat on the mat.",
    "A kitten was sitting on the rug.",
    "What is the capital of France?",
    "Paris is the capital city of France.",
    "The stock market fell sharply today.",
    "Share prices dropped steeply on Wall Street this afternoon.",
    "She plays the violin in an orchestra.",
    "He is a violinist with the symphony.",
    "Heavy rain is expected tomorrow morning.",
    "The forecast says it will pour early tomorrow.",
    "The server returned a 503 error under load.",
    "Under heavy traffic the service answered with 503 Service Unavailable.",
    "Quarterly revenue grew by twelve percent.",
    "Sales for the quarter rose 12%.",
    "My flight was delayed by three hours.",
    "The plane left three hours late.",
    "Photosynthesis converts light into chemical energy.",
    "Plants turn sunlight into sugar through photosynthesis.",
    "The recipe calls for two cups of flour.",
    "You need 2 cups of flour for this recipe.",
    "A tokenizer splits text into subword units.",
    "WordPiece breaks words into smaller pieces from a fixed vocabulary.",
    "Pump vibration rises when the bearing wears out.",
    "The compressor seal leaked overnight.",
    "Invoice 4471 is overdue by thirty days.",
    "Payment for order 4471 has not arrived yet.",
    "Order #12345 shipped on 2024-03-07 at 14:05 UTC.",
    "Price: $1,299.99 (incl. 20% VAT)",
    "def f(x): return x ** 2  # square",
    "Café naïve résumé façade",
    "日本語のテキストを埋め込みます。",
    "中文句子也应该可以编码。",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "Admission control refuses work that cannot finish before its deadline.",
    "Dynamic batching groups requests to amortise the cost of each model call.",
    "Token buckets refill at a fixed rate and never hold more than their capacity.",
    "Power of two choices picks the less loaded of two randomly sampled replicas.",
)
"""Paraphrase pairs (so nearest neighbours mean something), numbers, code, several scripts."""

_DECIMALS = 4


@dataclass(frozen=True, slots=True)
class Agreement:
    """A derived version's agreement with ``source`` on ``texts`` reference texts."""

    source: str
    """The version it was derived from."""
    texts: int
    mean_cosine: float
    min_cosine: float
    nn_agreement: float
    """The share of texts whose nearest other text is the same under both versions."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> Agreement:
        if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(cls)}:
            raise ModelIntegrityError(f"an agreement record has the wrong fields: {raw!r}")
        figures = [raw["mean_cosine"], raw["min_cosine"], raw["nn_agreement"]]
        if not isinstance(raw["source"], str) or not isinstance(raw["texts"], int):
            raise ModelIntegrityError(f"an agreement record is malformed: {raw!r}")
        if not all(isinstance(f, int | float) and -1.0 <= f <= 1.0 for f in figures):
            raise ModelIntegrityError(f"an agreement record's figures are out of range: {raw!r}")
        return cls(raw["source"], raw["texts"], *(float(f) for f in figures))


def measure(source_version: str, source: Backend, variant: Backend) -> Agreement:
    """The variant's agreement with its source on ``REFERENCE_TEXTS``, rounded."""
    compared = compare_models(source, variant, REFERENCE_TEXTS)
    return Agreement(
        source=source_version,
        texts=len(REFERENCE_TEXTS),
        mean_cosine=round(compared.mean_cosine, _DECIMALS),
        min_cosine=round(compared.min_cosine, _DECIMALS),
        nn_agreement=round(compared.nn_agreement, _DECIMALS),
    )
