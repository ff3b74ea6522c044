"""Fixtures for the model tests: the default model built once, a reference, a corpus.

The reference (sentence-transformers on torch) is only ever loaded from the
package's local directory, with the Hugging Face hub switched to offline mode
and outbound TCP refused, so a test can never reach the network.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from headway.models.agreement import REFERENCE_TEXTS
from headway.models.importer import default_model_dir, import_default
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends.onnx import OnnxBackend

_LONG_PARAGRAPH = (
    "Admission control decides, before any work is done, whether a request can finish "
    "within its deadline given the work already queued. When arrivals exceed capacity, "
    "an unbounded queue turns every request into a late one; a bounded queue with early "
    "refusal keeps latency flat for the requests it accepts and tells the others to retry. "
)

EVAL_TEXTS: tuple[str, ...] = (
    # short
    "Hello world!",
    "hi",
    "a",
    "OK",
    "Thanks.",
    "yes",
    # paraphrase pairs, so nearest neighbours are meaningful (the variants' reference set's)
    *REFERENCE_TEXTS[:24],
    # numbers and punctuation
    "3.14159 2.71828 1.41421",
    "Order #12345 shipped on 2024-03-07 at 14:05 UTC.",
    "+1 (555) 010-9999 ext. 42",
    "Price: $1,299.99 (incl. 20% VAT)",
    "!!! ??? ... --- *** ###",
    "(a + b)^2 = a^2 + 2ab + b^2",
    "e-mail: someone@example.com; url: https://example.com/a/b?c=d&e=f",
    "C:\\Program Files\\headway\\bin\\worker.exe --threads=1",
    "def f(x): return x ** 2  # square",
    '{"model": "minilm", "input": ["a", "b"]}',
    # unicode
    "Café naïve résumé façade coöperate",
    "Ünïcödé tëxt wïth dïäcrïtïcs",
    "日本語のテキストを埋め込みます。",
    "中文句子也应该可以编码。",
    "Привет, как дела?",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "emoji 🙂🚀🔥 and symbols ✓ ✗ → ∞",
    "ﬁ ligature and ＦＵＬＬＷＩＤＴＨ letters",
    "tab\tseparated\tvalues\nand a new line",
    "   leading and trailing spaces   ",
    "",
    # medium
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "In distributed systems, retries without a budget can amplify an outage into a storm.",
    "Batching amortises per-call overhead but waiting for a full batch adds queueing delay.",
    "A content-addressed store names every artifact by the hash of what it contains.",
    "Token buckets refill at a fixed rate and never hold more than their capacity.",
    "Power of two choices picks the less loaded of two randomly sampled replicas.",
    # long: more than 256 tokens, so truncation is exercised
    _LONG_PARAGRAPH * 4,
    ("Once upon a time, in a land of endless data centres, " * 40).strip(),
    " ".join(str(n) for n in range(400)),
    "supercalifragilisticexpialidocious " * 120,
    "日本語 " * 300,
    ("word, " * 500).strip(),
)


@pytest.fixture(scope="session")
def eval_texts() -> tuple[str, ...]:
    return EVAL_TEXTS


@pytest.fixture(scope="session")
def model_store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    return ModelStore(tmp_path_factory.mktemp("model-store"))


@pytest.fixture(scope="session")
def default_model(model_store: ModelStore) -> StoredModel:
    return import_default(model_store)


@pytest.fixture(scope="session")
def default_backend(default_model: StoredModel) -> OnnxBackend:
    return OnnxBackend.load(default_model)


@pytest.fixture(scope="package")
def offline() -> Iterator[None]:
    """Hub offline (env and the already-imported constant) and outbound TCP refused."""

    def refuse(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"model tests must not touch the network ({address!r})")
        original_connect(self, address)

    # Imported before the variable is set, so its constant is read from the real environment
    # and, patched here, restored after: a later test in this process (a TEI client against
    # a local server) is not left offline.
    import huggingface_hub.constants as hub_constants

    original_connect = socket.socket.connect
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        mp.setattr(socket.socket, "connect", refuse)
        yield


@pytest.fixture(scope="package")
def sentence_transformer(offline: None) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(default_model_dir()), device="cpu")
