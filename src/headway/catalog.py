"""Which models exist: the store's artifacts named in the registry.

Importing puts an artifact in the content-addressed store and records its
version and aliases in the registry; serving resolves an alias to a version
once, at start-up, and loads exactly that artifact.
"""

from __future__ import annotations

import hashlib
import json

from headway.models.store import ModelStore, StoredModel
from headway.registry.model import SYSTEM, Actor, ModelRecord
from headway.registry.store import RegistryStore
from headway.settings import Settings, SyntheticSettings

DEFAULT_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")
SYNTHETIC_ALIAS = "synthetic"


def record_of(model: StoredModel) -> ModelRecord:
    manifest = model.manifest
    size_bytes = sum(entry.stat().st_size for entry in model.path.iterdir())
    return ModelRecord(
        model.version,
        manifest.name,
        manifest.kind,
        manifest.dimensions,
        manifest.quantization,
        size_bytes=size_bytes,
        max_tokens=manifest.max_tokens,
        matryoshka_dimensions=manifest.matryoshka_dimensions,
        prompts=manifest.prompts,
        default_prompt_name=manifest.default_prompt_name,
        agreement=manifest.agreement,
    )


def register(
    registry: RegistryStore,
    model: StoredModel,
    aliases: tuple[str, ...],
    actor: Actor = SYSTEM,
) -> ModelRecord:
    record = record_of(model)
    registry.add_model(record, aliases, actor=actor)
    return record


def stored_default_model(settings: Settings, registry: RegistryStore) -> ModelRecord | None:
    """What the registry names all-MiniLM-L6-v2, if its artifact is in the store."""
    existing = registry.resolve_model(settings.embed_model)
    if existing is not None and (settings.model_root / existing.version).is_dir():
        return existing
    return None


def ensure_default_model(settings: Settings, registry: RegistryStore) -> ModelRecord:
    """Import all-MiniLM-L6-v2 unless the registry already names a stored artifact for it."""
    existing = stored_default_model(settings, registry)
    if existing is not None:
        return existing
    from headway.models.importer import import_default

    return register(registry, import_default(ModelStore(settings.model_root)), DEFAULT_ALIASES)


def synthetic_record(synthetic: SyntheticSettings) -> ModelRecord:
    """The synthetic backend as a model: its version names what decides its outputs and
    errors (the width, the seed, the failure share), not its costs, so replicas that
    differ only in speed serve one version. The seed and the failure share are hashed
    only when set, so the version of a synthetic model without them never changes."""
    decisive: dict[str, float] = {"dimensions": synthetic.dimensions}
    decisive |= {
        k: v for k, v in (("seed", synthetic.seed), ("fail_share", synthetic.fail_share)) if v
    }
    params = json.dumps(decisive).encode()
    version = hashlib.sha256(b"synthetic\0" + params).hexdigest()
    return ModelRecord(version, SYNTHETIC_ALIAS, "embedding", synthetic.dimensions, "none")


def synthetic_aliases(synthetic: SyntheticSettings) -> tuple[str, ...]:
    """Only a synthetic model with the default seed and no failures takes the alias, so
    workers started with other outputs (in any order) never move it."""
    plain = synthetic.seed == 0 and synthetic.fail_share == 0
    return (SYNTHETIC_ALIAS,) if plain else ()
