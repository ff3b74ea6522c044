"""Dynamic int8 quantization of the default model, and the comparison it is judged by."""

from __future__ import annotations

import pytest

from headway.models.agreement import REFERENCE_TEXTS
from headway.models.evaluate import compare_models
from headway.models.store import ModelStore, StoredModel
from headway.variants import derive_int8
from headway.worker.backends.onnx import OnnxBackend


@pytest.fixture(scope="module")
def int8_model(model_store: ModelStore, default_model: StoredModel) -> StoredModel:
    return derive_int8(model_store, default_model)


def test_int8_records_its_agreement_with_its_source(
    int8_model: StoredModel, default_model: StoredModel, model_store: ModelStore
) -> None:
    agreement = int8_model.manifest.agreement
    assert agreement is not None
    assert (agreement.source, agreement.texts) == (default_model.version, len(REFERENCE_TEXTS))
    measured = compare_models(
        OnnxBackend.load(default_model), OnnxBackend.load(int8_model), REFERENCE_TEXTS
    )
    print(f"int8 vs fp32 on the reference texts: {measured}")
    assert agreement.mean_cosine == round(measured.mean_cosine, 4) >= 0.98
    assert agreement.min_cosine == round(measured.min_cosine, 4)
    assert agreement.nn_agreement == round(measured.nn_agreement, 4) >= 0.75
    assert derive_int8(model_store, default_model) == int8_model  # the same bytes again
    assert default_model.manifest.agreement is None


def test_int8_is_a_new_version_with_its_own_manifest(
    int8_model: StoredModel, default_model: StoredModel, model_store: ModelStore
) -> None:
    assert int8_model.version != default_model.version
    assert int8_model.manifest.quantization == "int8"
    assert int8_model.manifest.name == "all-MiniLM-L6-v2-int8"
    assert int8_model.manifest.dimensions == default_model.manifest.dimensions
    assert int8_model.manifest.max_tokens == default_model.manifest.max_tokens
    assert int8_model.tokenizer_path.read_bytes() == default_model.tokenizer_path.read_bytes()
    # MatMul weights shrink 4x; the word embeddings (half of the file) stay float32
    assert int8_model.onnx_path.stat().st_size < default_model.onnx_path.stat().st_size * 0.7
    model_store.verify(int8_model.version)


def test_int8_stays_close_to_fp32(
    int8_model: StoredModel, default_backend: OnnxBackend, eval_texts: tuple[str, ...]
) -> None:
    comparison = compare_models(default_backend, OnnxBackend.load(int8_model), eval_texts)
    print(f"int8 vs fp32: {comparison}")
    assert comparison.mean_cosine >= 0.98
    assert comparison.min_cosine >= 0.9
    assert comparison.nn_agreement >= 0.75


def test_a_model_compared_with_itself_agrees_completely(
    default_backend: OnnxBackend, eval_texts: tuple[str, ...]
) -> None:
    comparison = compare_models(default_backend, default_backend, eval_texts)
    assert comparison.min_cosine == pytest.approx(1.0, abs=1e-6)
    assert comparison.nn_agreement == 1.0
