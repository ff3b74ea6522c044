"""What a Hugging Face or sentence-transformers folder says about the model in it.

Read from the files alone (no torch, no network), as sentence-transformers reads them:

- **kind**: ``config.json``'s ``architectures`` name a ``…ForSequenceClassification``:
  a cross-encoder; anything else: an embedding model.
- **pooling and normalisation**: ``modules.json`` lists the pipeline; headway serves
  ``Transformer`` → ``Pooling`` (mean, CLS or last token; ``1_Pooling/config.json``, in
  either its ``pooling_mode`` or its older ``pooling_mode_*`` form) → optional
  ``Normalize``. No ``modules.json``: mean pooling, not normalised (what
  sentence-transformers assumes for a plain transformers folder), and the import says so.
- **maximum length**: ``sentence_bert_config.json``'s ``max_seq_length``, else
  ``tokenizer_config.json``'s ``model_max_length``, never more than the position
  embeddings allow.
- **prompts**: ``config_sentence_transformers.json``'s ``prompts`` and
  ``default_prompt_name``;
- **lowercasing**: ``sentence_bert_config.json``'s ``do_lower_case``, a ``Lowercase``
  normalizer put first in the artifact's tokenizer unless it lowercases already.

An ``onnx/model.onnx`` or ``model.onnx`` in the folder is the graph to import when
headway builds none for the architecture (or the folder has no safetensors).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headway.models.errors import ModelImportError
from headway.models.graphs.encoders import find_family, max_positions
from headway.models.graphs.heads import PoolingMode
from headway.models.manifest import ModelKind

CONFIG_FILE = "config.json"
SBERT_FILE = "sentence_bert_config.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_CANDIDATES = ("onnx/model.onnx", "model.onnx")
_LONGEST_SANE = 1_000_000  # tokenizers without a limit say 1e30
_ST_POOLING: dict[str, PoolingMode] = {"mean": "mean", "cls": "cls", "lasttoken": "last"}
_ST_LEGACY_POOLING = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "lasttoken",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
}
_SERVED_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True, slots=True)
class FolderModel:
    """A model folder's metadata; ``assumed`` says what no file said."""

    directory: Path
    config: dict[str, Any]
    kind: ModelKind
    pooling: PoolingMode
    """Embedding models only (a cross-encoder's head reads the first token)."""
    normalize: bool
    max_tokens: int
    prompts: tuple[tuple[str, str], ...]
    default_prompt_name: str | None
    assumed: tuple[str, ...]
    lowercase: bool = False
    """``sentence_bert_config.json``'s ``do_lower_case``: inputs are lowercased first."""

    @property
    def name(self) -> str:
        return self.directory.resolve().name

    @property
    def weights(self) -> Path | None:
        path = self.directory / WEIGHTS_FILE
        return path if path.is_file() else None

    @property
    def onnx(self) -> Path | None:
        return next(
            (self.directory / c for c in ONNX_CANDIDATES if (self.directory / c).is_file()), None
        )

    @property
    def tokenizer(self) -> Path:
        return self.directory / "tokenizer.json"


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG_FILE).is_file()


def read_folder(directory: Path) -> FolderModel:
    """The metadata of the model folder ``directory``; see the module docstring."""
    config = read_json(directory / CONFIG_FILE)
    architectures = config.get("architectures") or []
    kind: ModelKind = (
        "cross-encoder"
        if any(str(a).endswith("ForSequenceClassification") for a in architectures)
        else "embedding"
    )
    assumed: list[str] = []
    pooling, normalize = _pipeline(directory, kind, assumed)
    prompts, default_prompt = _prompts(directory)
    return FolderModel(
        directory=directory,
        config=config,
        kind=kind,
        pooling=pooling,
        normalize=normalize,
        max_tokens=_max_tokens(directory, config, assumed),
        prompts=prompts,
        default_prompt_name=default_prompt,
        assumed=tuple(assumed),
        lowercase=_sbert_config(directory).get("do_lower_case") is True,
    )


def _pipeline(directory: Path, kind: ModelKind, assumed: list[str]) -> tuple[PoolingMode, bool]:
    modules_file = directory / "modules.json"
    if not modules_file.is_file():
        if kind == "embedding":
            assumed.append("no modules.json: mean pooling, not normalised")
        return "mean", False
    modules = _read_json_list(modules_file)
    types = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if unserved := [t for t in types if t not in _SERVED_MODULES]:
        raise ModelImportError(
            f"{modules_file}: module {unserved[0]} is not one headway serves "
            f"({' -> '.join(_SERVED_MODULES)}); export the whole pipeline to ONNX instead "
            f"and import it with --onnx"
        )
    pooling: PoolingMode = "mean"
    for module, kind_name in zip(modules, types, strict=True):
        if kind_name == "Transformer" and module.get("path", "") != "":
            raise ModelImportError(
                f"{modules_file}: the transformer is in {module['path']!r}; "
                f"import that folder (with its config.json) instead"
            )
        if kind_name == "Pooling":
            pooling = _pooling(directory / str(module.get("path", "1_Pooling")) / CONFIG_FILE)
    return pooling, "Normalize" in types


def _pooling(path: Path) -> PoolingMode:
    config = read_json(path)
    if config.get("include_prompt", True) is not True:
        raise ModelImportError(
            f"{path}: include_prompt false (prompt tokens left out of the pooling) is not supported"
        )
    mode: Any = config.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in _ST_LEGACY_POOLING.items() if config.get(key) is True]
        mode = modes[0] if len(modes) == 1 else (modes or "mean")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    pooling = _ST_POOLING.get(mode) if isinstance(mode, str) else None
    if pooling is None:
        raise ModelImportError(
            f"{path}: pooling {mode!r} is not supported (supported: "
            f"{', '.join(_ST_POOLING)}); export the model with its pooling to ONNX instead"
        )
    return pooling


def _max_tokens(directory: Path, config: dict[str, Any], assumed: list[str]) -> int:
    family = find_family(config)
    if family is not None:
        limit = max_positions(family, config)
    else:  # an architecture imported from its ONNX export
        limit = int(config.get("max_position_embeddings") or 512)
    value = _sbert_config(directory).get("max_seq_length")
    if isinstance(value, int) and value > 0:
        return _within(value, limit, directory / SBERT_FILE)
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.is_file():
        value = read_json(tokenizer_config).get("model_max_length")
        if isinstance(value, int | float) and 0 < value < _LONGEST_SANE:
            return min(int(value), limit)
    assumed.append(f"no maximum length given: {limit} tokens, as the position embeddings allow")
    return limit


def _sbert_config(directory: Path) -> dict[str, Any]:
    path = directory / SBERT_FILE
    return read_json(path) if path.is_file() else {}


def _within(value: int, limit: int, path: Path) -> int:
    if value > limit:
        raise ModelImportError(f"{path}: max_seq_length {value} exceeds the model's {limit}")
    return value


def _prompts(directory: Path) -> tuple[tuple[tuple[str, str], ...], str | None]:
    path = directory / "config_sentence_transformers.json"
    if not path.is_file():
        return (), None
    config = read_json(path)
    raw = config.get("prompts") or {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise ModelImportError(f"{path}: prompts must map names to strings")
    default = config.get("default_prompt_name")
    if default is not None and default not in raw:
        raise ModelImportError(f"{path}: default_prompt_name {default!r} is not among the prompts")
    return tuple(sorted(raw.items())), default


def read_json(path: Path) -> dict[str, Any]:
    raw = _load(path)
    if not isinstance(raw, dict):
        raise ModelImportError(f"{path} is not a JSON object")
    return raw


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    raw = _load(path)
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise ModelImportError(f"{path} is not a JSON list of objects")
    return raw


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelImportError(f"cannot read {path}: {exc}") from exc
