"""Which models exist: the store's artifacts named in the registry.

Importing puts an artifact in the content-addressed store and records its
version and aliases in the registry; serving resolves an alias to a version
once, at start-up, and loads exactly that artifact.
"""

from __future__ import annotations

import hashlib
import json

from headway.models.store import ModelStore, StoredModel
from headway.registry.model import ModelRecord
from headway.registry.sqlite import Registry
from headway.settings import Settings, SyntheticSettings

DEFAULT_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")
SYNTHETIC_ALIAS = "synthetic"


def record_of(model: StoredModel) -> ModelRecord:
    manifest = model.manifest
    return ModelRecord(
        model.version, manifest.name, manifest.kind, manifest.dimensions, manifest.quantization
    )


def register(registry: Registry, model: StoredModel, aliases: tuple[str, ...]) -> ModelRecord:
    record = record_of(model)
    registry.add_model(record, aliases)
    return record


def ensure_default_model(settings: Settings, registry: Registry) -> ModelRecord:
    """Import all-MiniLM-L6-v2 unless the registry already names a stored artifact for it."""
    store = ModelStore(settings.model_root)
    existing = registry.resolve_model(settings.embed_model)
    if existing is not None and (settings.model_root / existing.version).is_dir():
        return existing
    from headway.models.importer import import_default

    return register(registry, import_default(store), DEFAULT_ALIASES)


def synthetic_record(synthetic: SyntheticSettings) -> ModelRecord:
    """The synthetic backend as a model: its version names what decides its outputs (the
    width), not its costs, so replicas that differ only in speed serve one version."""
    params = json.dumps({"dimensions": synthetic.dimensions}).encode()
    version = hashlib.sha256(b"synthetic\0" + params).hexdigest()
    return ModelRecord(version, SYNTHETIC_ALIAS, "embedding", synthetic.dimensions, "none")
