"""The graph builder on tiny random weights: structure, prefixes, refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from headway.models.errors import ModelImportError
from headway.models.graphs.encoders import build_graph, relative_buckets
from headway.models.graphs.heads import Classified, Pooled

CONFIG: dict[str, Any] = {
    "model_type": "bert",
    "hidden_size": 8,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 16,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
}
VOCAB, POSITIONS, LABELS = 50, 16, 3
MEAN_L2 = Pooled("mean", normalize=True)


def tiny_weights(prefix: str = "", seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inter = CONFIG["hidden_size"], CONFIG["intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (VOCAB, h),
        "embeddings.position_embeddings.weight": (POSITIONS, h),
        "embeddings.token_type_embeddings.weight": (2, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
        "pooler.dense.weight": (h, h),
        "pooler.dense.bias": (h,),
    }
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
            shapes[f"{p}{name}.weight"] = (h, h)
            shapes[f"{p}{name}.bias"] = (h,)
        shapes[f"{p}attention.output.dense.weight"] = (h, h)
        shapes[f"{p}attention.output.dense.bias"] = (h,)
        shapes[f"{p}intermediate.dense.weight"] = (inter, h)
        shapes[f"{p}intermediate.dense.bias"] = (inter,)
        shapes[f"{p}output.dense.weight"] = (h, inter)
        shapes[f"{p}output.dense.bias"] = (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{ln}.weight"] = (h,)
            shapes[f"{p}{ln}.bias"] = (h,)
    weights = {prefix + k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    weights["classifier.weight"] = rng.normal(size=(LABELS, h)).astype(np.float32)
    weights["classifier.bias"] = rng.normal(size=(LABELS,)).astype(np.float32)
    return weights


def run(model: onnx.ModelProto, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    output: np.ndarray = session.run(None, feeds)[0]
    return output


IDS = np.array([[1, 5, 9, 2, 0, 0], [1, 7, 3, 4, 8, 2]], dtype=np.int64)
MASK = (np.arange(6) < np.array([[4], [6]])).astype(np.int64)


def test_interface_is_opset_17_with_dynamic_batch_and_sequence() -> None:
    model = build_graph(CONFIG, tiny_weights(), MEAN_L2)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    for value in model.graph.input:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]
    assert [v.name for v in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [v.name for v in model.graph.output] == ["embeddings"]


def test_embeddings_are_unit_rows_and_ignore_padding() -> None:
    model = build_graph(CONFIG, tiny_weights(), MEAN_L2)
    batch = run(model, IDS, MASK)
    assert batch.shape == (2, CONFIG["hidden_size"])
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-6)
    alone = run(model, IDS[:1, :4], MASK[:1, :4])
    np.testing.assert_allclose(alone[0], batch[0], atol=1e-6)


def test_bert_prefix_is_optional() -> None:
    plain = run(build_graph(CONFIG, tiny_weights(), MEAN_L2), IDS, MASK)
    prefixed = run(build_graph(CONFIG, tiny_weights("bert."), MEAN_L2), IDS, MASK)
    np.testing.assert_array_equal(plain, prefixed)


def test_classification_head_outputs_one_logit_per_label() -> None:
    model = build_graph(CONFIG, tiny_weights("bert."), Classified())
    assert [v.name for v in model.graph.output] == ["logits"]
    logits = run(model, IDS, MASK)
    assert logits.shape == (2, LABELS)
    assert np.all(np.isfinite(logits))


def test_missing_tensor_is_an_import_error() -> None:
    weights = tiny_weights()
    del weights["encoder.layer.1.output.dense.bias"]
    with pytest.raises(ModelImportError, match=r"encoder\.layer\.1\.output\.dense\.bias"):
        build_graph(CONFIG, weights, MEAN_L2)


@pytest.mark.parametrize(
    "change",
    [
        {"hidden_act": "silu"},
        {"model_type": "gpt2"},
        {"num_attention_heads": 3},
        {"position_embedding_type": "relative_key"},
        {"hidden_size": None},
    ],
)
def test_unsupported_configs_are_import_errors(change: dict[str, Any]) -> None:
    with pytest.raises(ModelImportError):
        build_graph({**CONFIG, **change}, tiny_weights(), MEAN_L2)


def test_relative_buckets_are_mpnets_own(offline: None) -> None:
    import torch
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    positions = 514
    offsets = torch.arange(-(positions - 1), positions)
    expected = MPNetEncoder.relative_position_bucket(offsets).numpy()
    np.testing.assert_array_equal(relative_buckets(positions), expected)
