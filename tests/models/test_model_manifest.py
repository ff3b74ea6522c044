from __future__ import annotations

import json

import pytest

from headway.models.errors import ModelIntegrityError
from headway.models.manifest import ModelManifest

MANIFEST = ModelManifest(
    kind="cross-encoder",
    name="rerank-ünï",
    dimensions=1,
    max_tokens=512,
    quantization="int8",
    source="pypi:x",
)


def test_round_trip() -> None:
    assert ModelManifest.from_json(MANIFEST.to_json()) == MANIFEST


def test_json_is_canonical() -> None:
    text = MANIFEST.to_json()
    assert text.endswith("\n")
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert text == ModelManifest.from_json(text).to_json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", "classifier"),
        ("quantization", "int4"),
        ("dimensions", 0),
        ("dimensions", True),
        ("max_tokens", "256"),
        ("name", None),
    ],
)
def test_invalid_fields_are_refused(field: str, value: object) -> None:
    raw = json.loads(MANIFEST.to_json())
    raw[field] = value
    with pytest.raises(ModelIntegrityError):
        ModelManifest.from_json(json.dumps(raw))


def test_narrower_widths_round_trip_and_are_written_only_when_declared() -> None:
    assert "matryoshka_dimensions" not in MANIFEST.to_json()  # older artifacts keep their bytes
    embedding = ModelManifest("embedding", "nomic", 768, 8192, "none", "x")
    declared = ModelManifest.from_json(
        json.dumps(json.loads(embedding.to_json()) | {"matryoshka_dimensions": [256, 512]})
    )
    assert declared.matryoshka_dimensions == (512, 256)  # widest first
    assert ModelManifest.from_json(declared.to_json()) == declared


@pytest.mark.parametrize("widths", [[768], [0], [True], [256, 256], "256", [1.5]])
def test_narrower_widths_must_be_below_the_width_and_distinct(widths: object) -> None:
    raw = json.loads(ModelManifest("embedding", "nomic", 768, 8192, "none", "x").to_json())
    raw["matryoshka_dimensions"] = widths
    with pytest.raises(ModelIntegrityError):
        ModelManifest.from_json(json.dumps(raw))


@pytest.mark.parametrize("text", ["", "[]", "{not json"])
def test_not_an_object(text: str) -> None:
    with pytest.raises(ModelIntegrityError):
        ModelManifest.from_json(text)
