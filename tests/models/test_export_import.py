"""The real all-MiniLM-L6-v2 as an ONNX export brings it: a ``last_hidden_state`` graph in
``onnx/model.onnx`` beside the folder's sentence-transformers files, no weights.

The export is the one optimum makes (``optimum-cli export onnx --task feature-extraction``:
the base model traced by ``torch.onnx.export`` with dynamic batch and sequence axes);
optimum itself cannot be installed beside transformers 5 (optimum-onnx 0.1 asks for
transformers < 4.58), so the test traces the model the same way. Imported from the
folder with no flags, it must serve the packaged import's vectors.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from headway.models.importer import default_model_dir
from headway.models.intake import ImportOptions, import_path
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends.onnx import OnnxBackend
from tests.models.test_architectures import cosines

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_last_hidden_state(model_dir: Path, onnx_file: Path) -> None:
    """``model_dir``'s base model as optimum exports it for feature extraction."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(INPUTS, inputs, strict=True))).last_hidden_state

    ids = torch.ones(2, 7, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    onnx_file.parent.mkdir(parents=True)
    with warnings.catch_warnings():  # the tracer's warnings about Python branches
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(),
            (ids, ids, torch.zeros_like(ids)),
            str(onnx_file),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes={name: axes for name in (*INPUTS, "last_hidden_state")},
            opset_version=17,
            dynamo=False,
        )


@pytest.fixture(scope="module")
def exported_folder(tmp_path_factory: pytest.TempPathFactory, offline: None) -> Path:
    folder = tmp_path_factory.mktemp("minilm-export") / "all-MiniLM-L6-v2"
    shutil.copytree(default_model_dir(), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    export_last_hidden_state(default_model_dir(), folder / "onnx" / "model.onnx")
    return folder


def test_export_imports_from_its_folder_with_no_flags_and_serves_the_packaged_vectors(
    exported_folder: Path,
    model_store: ModelStore,
    default_backend: OnnxBackend,
    eval_texts: tuple[str, ...],
) -> None:
    imported = import_path(model_store, exported_folder, ImportOptions())
    manifest = imported.model.manifest
    assert (manifest.pooling, manifest.normalize, manifest.max_tokens) == ("mean", True, 256)
    assert manifest.dimensions == 384
    backend = OnnxBackend.load(imported.model)
    served = backend.run(backend.encode_texts(eval_texts))
    packaged = default_backend.run(default_backend.encode_texts(eval_texts))
    assert cosines(served, packaged).min() >= 0.99999


def test_the_graph_alone_reads_the_folder_above_it(
    exported_folder: Path, model_store: ModelStore, default_model: StoredModel
) -> None:
    graph = exported_folder / "onnx" / "model.onnx"
    manifest = import_path(model_store, graph, ImportOptions()).model.manifest
    assert (manifest.pooling, manifest.normalize, manifest.max_tokens) == ("mean", True, 256)
    plain = import_path(model_store, graph, ImportOptions(pooling="cls", normalize=False))
    assert (plain.model.manifest.pooling, plain.model.manifest.normalize) == ("cls", False)
    assert plain.model.version != default_model.version
