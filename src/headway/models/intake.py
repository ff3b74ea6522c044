"""One entry for every model a user brings: a folder, or an ONNX graph with or without one.

``import_path`` takes a Hugging Face / sentence-transformers folder (``models.folder``) or
an ``.onnx`` file. For a file, the folder it lies in (or the one above, where an export
wrote ``onnx/model.onnx``) supplies what the file cannot say (kind, pooling,
normalisation, maximum length, prompts, the tokenizer) when it is a model folder; what
the caller sets (``ImportOptions``) wins over both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from headway.models.errors import ModelImportError
from headway.models.folder import FolderModel, is_model_folder, read_folder
from headway.models.graphs.heads import PoolingMode
from headway.models.importer import import_folder, import_onnx
from headway.models.manifest import ModelKind, Pooling
from headway.models.store import ModelStore, StoredModel


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """What the caller says; None: as the folder (or the graph) says."""

    name: str | None = None
    kind: ModelKind | None = None
    pooling: Pooling | None = None
    normalize: bool | None = None
    max_tokens: int | None = None
    tokenizer: Path | None = None
    matryoshka_dimensions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Imported:
    model: StoredModel
    assumed: tuple[str, ...]
    """What no file said and the import assumed (printed for the user to check)."""


def import_path(store: ModelStore, path: Path, options: ImportOptions) -> Imported:
    if path.is_dir():
        if not is_model_folder(path):
            raise ModelImportError(f"{path} is not a model folder: it has no config.json")
        folder = _overridden(read_folder(path), options)
        if options.tokenizer is not None or options.matryoshka_dimensions:
            raise ModelImportError("--tokenizer and --matryoshka go with --onnx, not a folder")
        return Imported(import_folder(store, folder, name=options.name), folder.assumed)
    if path.suffix != ".onnx" or not path.is_file():
        raise ModelImportError(f"{path} is neither a model folder nor an .onnx file")
    home = next((d for d in (path.parent, path.parent.parent) if is_model_folder(d)), None)
    described = _overridden(read_folder(home), options) if home is not None else None
    tokenizer = options.tokenizer or _beside(path, "tokenizer.json")
    if tokenizer is None:
        raise ModelImportError(f"no tokenizer.json beside {path}: give one with --tokenizer")
    kind = options.kind or (described.kind if described else "embedding")
    explicit_pooling = options.pooling
    if explicit_pooling is None and kind == "cross-encoder":
        explicit_pooling = "none"
    if described is None and explicit_pooling is None:
        explicit_pooling = "none"  # no folder to say otherwise: the graph's rows as they are
    normalize = options.normalize
    if normalize is None:
        normalize = bool(described and described.normalize and kind == "embedding")
    model = import_onnx(
        store,
        path,
        tokenizer,
        kind=kind,
        name=options.name or (described.name if described else path.stem),
        pooling=explicit_pooling,
        token_pooling=_token_pooling(described),
        normalize=normalize,
        max_tokens=options.max_tokens or (described.max_tokens if described else 512),
        source=str(path),
        matryoshka_dimensions=options.matryoshka_dimensions,
        prompts=described.prompts if described else (),
        default_prompt_name=described.default_prompt_name if described else None,
        lowercase=bool(described and described.lowercase),
    )
    return Imported(model, described.assumed if described else ())


def _overridden(folder: FolderModel, options: ImportOptions) -> FolderModel:
    changes: dict[str, object] = {}
    if options.kind is not None:
        changes["kind"] = options.kind
    if options.pooling is not None and options.pooling != "none":
        changes["pooling"] = options.pooling
    if options.normalize is not None:
        changes["normalize"] = options.normalize
    if options.max_tokens is not None:
        changes["max_tokens"] = options.max_tokens
    return dataclasses.replace(folder, **changes) if changes else folder  # type: ignore[arg-type]


def _token_pooling(folder: FolderModel | None) -> PoolingMode:
    return folder.pooling if folder is not None else "mean"


def _beside(path: Path, name: str) -> Path | None:
    return next((d / name for d in (path.parent, path.parent.parent) if (d / name).is_file()), None)
