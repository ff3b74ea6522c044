"""Versions derived from another: made, then measured against their source on the
reference texts (``models.agreement``), so a rollout can refuse a variant that strays."""

from __future__ import annotations

from headway.models.agreement import Agreement, measure
from headway.models.importer import quantize_int8
from headway.models.store import ModelStore, StoredModel


def derive_int8(store: ModelStore, model: StoredModel) -> StoredModel:
    """``model``'s int8 quantization, its agreement with ``model`` in its manifest."""
    return quantize_int8(store, model, _measured)


def _measured(source: StoredModel, variant: StoredModel) -> Agreement:
    from headway.worker.backends.onnx import OnnxBackend

    def backend(model: StoredModel) -> OnnxBackend:  # the files as they are: nothing prepared
        return OnnxBackend.load(model, mapped_weights=False)

    return measure(source.version, backend(source), backend(variant))
