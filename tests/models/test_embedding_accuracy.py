"""The hand-built ONNX graph against sentence-transformers on torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from headway.models.store import StoredModel
from headway.worker.backends.onnx import OnnxBackend


def _reference(sentence_transformer: Any, texts: tuple[str, ...]) -> Any:
    return sentence_transformer.encode(list(texts), batch_size=16, convert_to_numpy=True)


def test_corpus_covers_truncation_and_size(
    default_backend: OnnxBackend, eval_texts: tuple[str, ...]
) -> None:
    lengths = [e.n_tokens for e in default_backend.encode_texts(eval_texts)]
    assert len(eval_texts) >= 64
    assert max(lengths) == 256  # several texts are longer and get truncated
    assert sum(n == 256 for n in lengths) >= 4
    assert min(lengths) == 2  # "" is [CLS] [SEP]


def test_token_ids_match_sentence_transformers(
    default_backend: OnnxBackend, sentence_transformer: Any, eval_texts: tuple[str, ...]
) -> None:
    features = sentence_transformer.preprocess(list(eval_texts))
    mask = features["attention_mask"].numpy()
    reference_ids = features["input_ids"].numpy()
    for row, encoded in enumerate(default_backend.encode_texts(eval_texts)):
        expected = tuple(int(i) for i in reference_ids[row][mask[row] == 1])
        assert encoded.ids == expected, eval_texts[row]


@pytest.mark.parametrize("mapped_weights", [True, False], ids=["prepared-copy", "artifact"])
def test_embeddings_match_sentence_transformers(
    default_model: StoredModel,
    mapped_weights: bool,
    sentence_transformer: Any,
    eval_texts: tuple[str, ...],
) -> None:
    """Both ways of loading: the prepared copy (ORT's optimized graph, weights mapped,
    what workers run) and the artifact itself."""
    backend = OnnxBackend.load(default_model, mapped_weights=mapped_weights)
    reference = _reference(sentence_transformer, eval_texts)
    ours = backend.run(backend.encode_texts(eval_texts))
    assert ours.dtype == np.float32
    assert ours.shape == (len(eval_texts), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.einsum("ij,ij->i", ours, reference) / np.linalg.norm(reference, axis=1)
    print(f"cosine to sentence-transformers: min {cosines.min():.7f} mean {cosines.mean():.7f}")
    assert cosines.min() >= 0.99999


def test_embedding_alone_equals_embedding_in_a_padded_batch(
    default_backend: OnnxBackend, eval_texts: tuple[str, ...]
) -> None:
    encoded = default_backend.encode_texts(eval_texts)
    batch = default_backend.run(encoded)  # every row padded to the longest text, 256 tokens
    padded = [row for row, e in enumerate(encoded) if e.n_tokens < 256]
    assert len(padded) >= 50
    alone = np.stack([default_backend.run([encoded[row]])[0] for row in padded])
    cosines = np.einsum("ij,ij->i", alone, batch[padded])
    assert cosines.min() >= 0.99999


def test_serving_never_imports_torch(default_model: StoredModel) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from headway.models.store import ModelStore
        from headway.worker.backends.onnx import OnnxBackend

        model = ModelStore(Path({str(default_model.path.parent)!r})).get({default_model.version!r})
        backend = OnnxBackend.load(model)
        assert backend.run(backend.encode_texts(["no torch here"])).shape == (1, 384)
        heavy = sorted({{"torch", "transformers", "sentence_transformers"}} & set(sys.modules))
        assert not heavy, heavy
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
