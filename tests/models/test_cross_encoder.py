"""A tiny BertForSequenceClassification (``tests.builders``) served as a cross-encoder.

No PyPI package ships a reranker's weights, so the test makes one: random but
seeded weights, saved the way transformers saves any checkpoint (``bert.``
prefixed safetensors), with the MiniLM tokenizer beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.models.folder import read_folder
from headway.models.importer import import_folder
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends.onnx import OnnxBackend
from tests.builders import TINY_MAX_POSITIONS as MAX_POSITIONS
from tests.builders import build_tiny_transformer

QUERY = "how do batching and admission control keep latency predictable?"
DOCUMENTS = (
    "Admission control refuses work that cannot finish before its deadline.",
    "Dynamic batching groups requests to amortise the cost of each model call.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Paris is the capital of France.",
    "",
    "Latency stays flat when the queue is bounded and overload is shed early. " * 20,
    "日本語の文書 🙂 with unicode and numbers 3.14159",
)


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory, offline: None) -> Path:
    directory = build_tiny_transformer(
        tmp_path_factory.mktemp("tiny-cross-encoder"), "bert", cross_encoder=True
    )
    assert (directory / "model.safetensors").is_file()  # transformers 5 always writes it
    return directory


@pytest.fixture(scope="module")
def cross_encoder_model(checkpoint_dir: Path, model_store: ModelStore) -> StoredModel:
    return import_folder(model_store, read_folder(checkpoint_dir), name="tiny-ce", source="test")


@pytest.fixture(scope="module")
def backend(cross_encoder_model: StoredModel) -> OnnxBackend:
    return OnnxBackend.load(cross_encoder_model)


@pytest.fixture(scope="module")
def reference(checkpoint_dir: Path, offline: None) -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(checkpoint_dir), device="cpu", max_length=MAX_POSITIONS)


def test_manifest_describes_a_cross_encoder(cross_encoder_model: StoredModel) -> None:
    manifest = cross_encoder_model.manifest
    assert (manifest.kind, manifest.dimensions, manifest.max_tokens) == (
        "cross-encoder",
        1,
        MAX_POSITIONS,
    )


def test_pair_ids_match_cross_encoder(backend: OnnxBackend, reference: Any) -> None:
    features = reference.preprocess([(QUERY, d) for d in DOCUMENTS])
    mask = features["attention_mask"].numpy()
    for row, encoded in enumerate(backend.encode_pairs(QUERY, DOCUMENTS)):
        keep = mask[row] == 1
        assert encoded.ids == tuple(int(i) for i in features["input_ids"].numpy()[row][keep])
        assert encoded.type_ids == tuple(
            int(i) for i in features["token_type_ids"].numpy()[row][keep]
        )
    assert max(e.n_tokens for e in backend.encode_pairs(QUERY, DOCUMENTS)) == MAX_POSITIONS


def test_scores_match_sigmoid_of_torch_logits(
    backend: OnnxBackend, checkpoint_dir: Path, offline: None
) -> None:
    import torch
    from transformers import BertForSequenceClassification

    from headway.worker.backends.onnx import pad_batch

    encoded = backend.encode_pairs(QUERY, DOCUMENTS)
    model = BertForSequenceClassification.from_pretrained(checkpoint_dir).eval()
    with torch.no_grad():
        inputs = {k: torch.from_numpy(v) for k, v in pad_batch(encoded).items()}
        logits = model(**inputs).logits[:, 0].numpy()
    expected = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    scores = backend.run(encoded)
    assert scores.dtype == np.float32
    assert scores.shape == (len(DOCUMENTS),)
    assert np.ptp(expected) > 0.05, "scores too close together for the ranking check to mean much"
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-4)
    assert list(np.argsort(-scores)) == list(np.argsort(-expected))


def test_scores_match_cross_encoder_predict(backend: OnnxBackend, reference: Any) -> None:
    expected = reference.predict([(QUERY, d) for d in DOCUMENTS], convert_to_numpy=True)
    scores = backend.run(backend.encode_pairs(QUERY, DOCUMENTS))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-4)
    assert list(np.argsort(-scores)) == list(np.argsort(-expected))


def test_each_pair_scores_the_same_alone_and_in_a_batch(backend: OnnxBackend) -> None:
    encoded = backend.encode_pairs(QUERY, DOCUMENTS)
    together = backend.run(encoded)
    alone = np.array([backend.run([e])[0] for e in encoded])
    np.testing.assert_allclose(alone, together, rtol=0, atol=1e-5)
