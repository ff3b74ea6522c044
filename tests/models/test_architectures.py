"""Every architecture headway builds a graph for, against torch on the same texts.

Each case is a seeded random-weight model made with transformers and saved as
sentence-transformers saves one (or, for a cross-encoder, as transformers saves a
``…ForSequenceClassification``), imported from its folder with no other input, and run on
ONNX Runtime. The reference is sentence-transformers on torch: every served vector has
cosine >= 0.99999 with its own, every score is within 1e-5 of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.models.errors import ModelImportError
from headway.models.folder import read_folder
from headway.models.importer import import_folder
from headway.models.store import ModelStore, StoredModel
from headway.worker.backends.onnx import OnnxBackend
from tests.builders import (
    TINY_MAX_POSITIONS,
    Architecture,
    build_tiny_sentence_transformer,
    build_tiny_transformer,
)
from tests.models.conftest import EVAL_TEXTS

PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = EVAL_TEXTS  # short to far past 128 tokens: truncation, every relative-position bucket

EMBEDDING_CASES: list[tuple[Architecture, str, bool]] = [
    ("bert", "mean", True),
    ("roberta", "cls", True),
    ("xlm-roberta", "mean", False),
    ("distilbert", "lasttoken", True),
    ("mpnet", "mean", True),
]
QUERY = "how do batching and admission control keep latency predictable?"
DOCUMENTS = (
    "Admission control refuses work that cannot finish before its deadline.",
    "Dynamic batching groups requests to amortise the cost of each model call.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "",
    "Latency stays flat when the queue is bounded and overload is shed early. " * 20,
    "日本語の文書 🙂 with unicode and numbers 3.14159",
)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dots = (a64 * b64).sum(axis=1)
    return np.asarray(dots / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)))


@pytest.fixture(scope="module", params=EMBEDDING_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def embedding_case(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    model_store: ModelStore,
    offline: None,
) -> tuple[Any, StoredModel]:
    architecture, pooling, normalize = request.param
    directory = tmp_path_factory.mktemp("st") / f"tiny-{architecture}"
    reference = build_tiny_sentence_transformer(
        directory,
        architecture,
        pooling=pooling,
        normalize=normalize,
        prompts=PROMPTS,
        default_prompt_name="query",
        corpus=TEXTS,
    )
    stored = import_folder(model_store, read_folder(directory))
    return reference, stored


def test_folder_metadata_reaches_the_manifest(embedding_case: tuple[Any, StoredModel]) -> None:
    reference, stored = embedding_case
    manifest = stored.manifest
    assert manifest.kind == "embedding"
    assert manifest.dimensions == reference.get_embedding_dimension()
    assert manifest.max_tokens == reference.max_seq_length == TINY_MAX_POSITIONS
    assert dict(manifest.prompts) == reference.prompts
    assert manifest.default_prompt_name == "query"


def test_vectors_match_sentence_transformers(embedding_case: tuple[Any, StoredModel]) -> None:
    reference, stored = embedding_case
    backend = OnnxBackend.load(stored)
    expected = reference.encode(list(TEXTS), prompt="", convert_to_numpy=True)
    served = backend.run(backend.encode_texts(TEXTS))
    assert served.shape == expected.shape
    assert cosines(served, expected).min() >= 0.99999
    spread = cosines(expected[:-1], expected[1:])
    assert spread.min() < 0.99, "random vectors too alike for the comparison to mean much"
    if type(reference[-1]).__name__ == "Normalize":
        np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)


def test_a_prompt_is_put_before_the_text_as_sentence_transformers_does(
    embedding_case: tuple[Any, StoredModel],
) -> None:
    reference, stored = embedding_case
    backend = OnnxBackend.load(stored)
    prompt = stored.manifest.prompt("passage")
    expected = reference.encode(list(TEXTS[:12]), prompt_name="passage", convert_to_numpy=True)
    served = backend.run(backend.encode_texts([prompt + t for t in TEXTS[:12]]))
    assert cosines(served, expected).min() >= 0.99999


@pytest.mark.parametrize("architecture", ["bert", "roberta", "xlm-roberta", "distilbert", "mpnet"])
def test_cross_encoder_scores_match_sentence_transformers(
    architecture: Architecture,
    tmp_path: Path,
    model_store: ModelStore,
    offline: None,
) -> None:
    from sentence_transformers import CrossEncoder

    directory = build_tiny_transformer(
        tmp_path / architecture, architecture, cross_encoder=True, corpus=TEXTS
    )
    folder = read_folder(directory)
    assert folder.kind == "cross-encoder"
    stored = import_folder(model_store, folder)
    backend = OnnxBackend.load(stored)
    reference = CrossEncoder(str(directory), device="cpu")
    expected = reference.predict([(QUERY, d) for d in DOCUMENTS], convert_to_numpy=True)
    scores = backend.run(backend.encode_pairs(QUERY, DOCUMENTS))
    assert np.ptp(expected) > 0.01, "scores too close together for the check to mean much"
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def test_a_plain_transformers_folder_is_mean_pooled_as_sentence_transformers_assumes(
    tmp_path: Path, model_store: ModelStore, offline: None
) -> None:
    from sentence_transformers import SentenceTransformer

    directory = build_tiny_transformer(tmp_path / "plain", "bert")
    folder = read_folder(directory)
    assert (folder.pooling, folder.normalize) == ("mean", False)
    assert any("mean pooling" in note for note in folder.assumed)
    backend = OnnxBackend.load(import_folder(model_store, folder))
    expected = SentenceTransformer(str(directory), device="cpu").encode(list(TEXTS))
    assert cosines(backend.run(backend.encode_texts(TEXTS)), expected).min() >= 0.99999


def _folder_with(tmp_path: Path, config: dict[str, Any], **files: Any) -> Path:
    directory = tmp_path / "folder"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "model.safetensors").write_bytes(b"")
    for name, content in files.items():
        path = directory / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
    return directory


def test_an_architecture_without_a_builder_names_those_built_and_the_export(
    tmp_path: Path,
) -> None:
    directory = _folder_with(tmp_path, {"model_type": "gpt2", "architectures": ["GPT2Model"]})
    with pytest.raises(ModelImportError) as refused:
        import_folder(ModelStore(tmp_path / "s"), read_folder(directory))
    message = str(refused.value)
    for named in ("gpt2", "bert", "xlm-roberta", "mpnet", "distilbert", "optimum-cli", "--onnx"):
        assert named in message


@pytest.mark.parametrize(
    ("files", "complaint"),
    [
        (
            {"modules.json": [{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}]},
            "Dense",
        ),
        (
            {
                "modules.json": [{"type": "x.Pooling", "path": "1_Pooling"}],
                "1_Pooling__config.json": {"pooling_mode": "max"},
            },
            "max",
        ),
        (
            {
                "modules.json": [{"type": "x.Pooling", "path": "1_Pooling"}],
                "1_Pooling__config.json": {"pooling_mode": "mean", "include_prompt": False},
            },
            "include_prompt",
        ),
        (
            {
                "config_sentence_transformers.json": {
                    "prompts": {"q": "q: "},
                    "default_prompt_name": "d",
                }
            },
            "default_prompt_name",
        ),
        ({"sentence_bert_config.json": {"max_seq_length": 9999}}, "max_seq_length"),
    ],
)
def test_what_a_folder_says_that_cannot_be_served_is_refused_with_a_reason(
    tmp_path: Path, files: dict[str, Any], complaint: str
) -> None:
    config = {"model_type": "bert", "architectures": ["BertModel"], "max_position_embeddings": 512}
    directory = _folder_with(tmp_path, config, **files)
    with pytest.raises(ModelImportError, match=complaint):
        read_folder(directory)


def test_legacy_pooling_flags_are_read(tmp_path: Path) -> None:
    directory = _folder_with(
        tmp_path,
        {"model_type": "bert", "architectures": ["BertModel"]},
        **{
            "modules.json": [
                {"type": "sentence_transformers.models.Transformer", "path": ""},
                {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},
            ],
            "1_Pooling__config.json": {
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
            },
        },
    )
    folder = read_folder(directory)
    assert (folder.pooling, folder.normalize) == ("cls", False)
    assert not any("pooling" in note for note in folder.assumed)


def test_do_lower_case_lowercases_as_sentence_transformers_does(
    tmp_path: Path, model_store: ModelStore, offline: None
) -> None:
    from sentence_transformers import SentenceTransformer

    directory = tmp_path / "cased"
    build_tiny_sentence_transformer(directory, "roberta", corpus=TEXTS)  # BPE: case-sensitive
    config = directory / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": True}))
    folder = read_folder(directory)
    assert folder.lowercase
    backend = OnnxBackend.load(import_folder(model_store, folder))
    texts = ["The QUICK Brown Fox", "PARIS is the capital of FRANCE", "hello World"]
    expected = SentenceTransformer(str(directory), device="cpu").encode(texts)
    assert cosines(backend.run(backend.encode_texts(texts)), expected).min() >= 0.99999
    lowered = backend.run(backend.encode_texts([t.lower() for t in texts]))
    np.testing.assert_allclose(backend.run(backend.encode_texts(texts)), lowered, atol=1e-6)
