"""What is sent: a weighted mix of request classes, bodies built before the clock starts.

Each request draws its class by weight, then its number of texts and each
text's length in words uniformly from the class's ranges, from one seeded RNG:
the same workload and count always give the same bytes. Texts are words from
``corpus.WORDS`` (each one WordPiece token), and no text repeats within a run:
the first ``serial_words`` words of the n-th text spell n in base
``len(WORDS)``, so a cache keyed on text content never hits. A text drawn
shorter than that is lengthened to ``serial_words`` words (3 words number 35
million texts).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from headway_tools.loadgen.corpus import WORDS
from headway_tools.loadgen.errors import InvalidSpec

DEFAULT_MODEL = "all-MiniLM-L6-v2"
EMBEDDINGS_PATH = "/v1/embeddings"


@dataclass(frozen=True, slots=True)
class RequestClass:
    """One kind of request: who sends it, how big it is, and how long it may take.

    ``texts`` and ``words`` are inclusive ``(low, high)`` ranges; ``timeout_ms``
    is sent as ``X-Timeout-Ms`` and is the deadline goodput is judged by.
    ``tier`` is a label for reports; the gateway takes the tier from the key.
    """

    name: str
    key: str
    weight: float = 1.0
    tier: str = "interactive"
    model: str = DEFAULT_MODEL
    texts: tuple[int, int] = (1, 1)
    words: tuple[int, int] = (8, 40)
    timeout_ms: int = 1000

    def __post_init__(self) -> None:
        where = f"class {self.name!r}"
        if not self.name:
            raise InvalidSpec("a request class needs a name")
        if not self.key:
            raise InvalidSpec(f"{where}: key (the tenant's API key) is empty")
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise InvalidSpec(f"{where}: weight must be positive, not {self.weight}")
        for field, (low, high) in (("texts", self.texts), ("words", self.words)):
            if not 1 <= low <= high:
                raise InvalidSpec(f"{where}: {field} must be a range 1 <= low <= high")
        if self.timeout_ms <= 0:
            raise InvalidSpec(f"{where}: timeout_ms must be positive, not {self.timeout_ms}")

    @property
    def deadline_s(self) -> float:
        return self.timeout_ms / 1000

    def headers(self) -> tuple[tuple[str, str], ...]:
        return request_headers(self.key, self.timeout_ms)


def request_headers(key: str, timeout_ms: int) -> tuple[tuple[str, str], ...]:
    """What every generated request carries: the tenant's key, JSON, its deadline."""
    return (
        ("Authorization", f"Bearer {key}"),
        ("Content-Type", "application/json"),
        ("X-Timeout-Ms", str(timeout_ms)),
    )


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request's class (an index into ``Workload.classes``), texts and JSON body."""

    class_index: int
    texts: int
    body: bytes


class _Body(msgspec.Struct):
    model: str
    input: list[str]


@dataclass(frozen=True, slots=True)
class Workload:
    classes: tuple[RequestClass, ...]
    seed: int = 0
    path: str = EMBEDDINGS_PATH

    def __post_init__(self) -> None:
        if not self.classes:
            raise InvalidSpec("a workload needs at least one request class")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise InvalidSpec(f"request class names must be unique: {names}")
        if not self.path.startswith("/"):
            raise InvalidSpec(f"the request path must start with '/', not {self.path!r}")

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def serial_words(self, count: int) -> int:
        """Words that number each text of a ``count``-request run uniquely."""
        return serial_words(count * max(c.texts[1] for c in self.classes))

    def prepare(self, count: int) -> Iterator[PreparedRequest]:
        """``count`` requests, lazily, so a caller can keep only what it sends."""
        rng = random.Random(f"headway.loadgen.workload:{self.seed}")
        total = sum(c.weight for c in self.classes)
        cum_weights = []
        running = 0.0
        for c in self.classes:
            running += c.weight / total
            cum_weights.append(running)
        picks = rng.choices(range(len(self.classes)), cum_weights=cum_weights, k=count)
        digits = self.serial_words(count)
        serial = 0
        for index in picks:
            cls = self.classes[index]
            texts = []
            for _ in range(rng.randint(*cls.texts)):
                texts.append(numbered_text(serial, rng.randint(*cls.words), digits, rng))
                serial += 1
            yield PreparedRequest(index, len(texts), msgspec.json.encode(_Body(cls.model, texts)))


def serial_words(most_texts: int) -> int:
    """Words that number ``most_texts`` texts uniquely (at least one)."""
    return max(1, math.ceil(math.log(max(most_texts, 2), len(WORDS))))


def numbered_text(serial: int, length: int, digits: int, rng: random.Random) -> str:
    """A text of ``length`` words (at least ``digits``) whose first ``digits`` spell ``serial``."""
    base = len(WORDS)
    words = [WORDS[serial // base**d % base] for d in range(digits)]
    words += rng.choices(WORDS, k=max(length, digits) - digits)
    return " ".join(words)
