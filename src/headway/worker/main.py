"""Building a worker from settings: which backend, which model versions."""

from __future__ import annotations

import functools

from headway.catalog import synthetic_aliases, synthetic_record
from headway.http.asgi import App
from headway.models.backend import Backend
from headway.models.store import ModelStore
from headway.models.weights.load import ArtifactLoader, weights_source
from headway.models.weights.signing import SignaturePolicy
from headway.otlp.setup import process_tracing
from headway.registry.model import Actor
from headway.registry.open import open_registry
from headway.registry.store import RegistryStore
from headway.settings import Settings
from headway.tls.hops import gateway_client
from headway.worker.app import WorkerService, build_worker_app
from headway.worker.batcher import BatchLimits
from headway.worker.metrics import WorkerMetrics
from headway.worker.sources import (
    FixedSource,
    LoadedModel,
    ModelSource,
    RefusingSource,
    RegistrySource,
)

POOL_KINDS = {"embed": "embedding", "rerank": "cross-encoder"}
"""The kind of model each pool serves every alias of (on demand)."""


def model_names_for(settings: Settings, registry: RegistryStore) -> tuple[str, ...]:
    """The worker's models: explicit, else the pool's alias (rerank falls back to embed)."""
    worker = settings.worker
    if worker.models:
        return worker.models
    if worker.pool == "rerank" and registry.resolve_model(settings.rerank_model) is not None:
        return (settings.rerank_model,)
    return (settings.embed_model,)


def synthetic_loader(settings: Settings) -> LoadedModel:
    """Runs in a thread at start-up: record the synthetic version, build its backend."""
    from headway.worker.backends.synthetic import SyntheticBackend

    synthetic = settings.worker.synthetic
    record = synthetic_record(synthetic)
    registry = open_registry(settings)
    try:  # closed each try: a start waiting for Postgres tries again and again
        registry.add_model(
            record, synthetic_aliases(synthetic), actor=Actor(f"worker:{settings.worker.pool}")
        )
    finally:
        registry.close()
    backend = SyntheticBackend(
        call_ms=synthetic.call_ms,
        text_ms=synthetic.text_ms,
        dimensions=synthetic.dimensions,
        hiccup_share=synthetic.hiccup_share,
        hiccup_ms=synthetic.hiccup_ms,
        seed=synthetic.seed,
        fail_share=synthetic.fail_share,
    )
    return LoadedModel(backend, record.version)


def artifact_loader(settings: Settings) -> ArtifactLoader:
    """Fetches what the local store lacks from ``weights.url`` (over the ``tls`` settings'
    client context for an https:// one), verifies every artifact and its signature."""
    tls = gateway_client(settings.tls)
    source = weights_source(settings.weights, tls.current if tls is not None else None)
    policy = SignaturePolicy.from_settings(settings.weights)
    return ArtifactLoader(ModelStore(settings.model_root), source, policy)


def model_source(settings: Settings) -> ModelSource:
    if settings.worker.backend == "synthetic":
        return FixedSource(lambda: synthetic_loader(settings))
    registry = open_registry(settings)
    loader = artifact_loader(settings)
    threads = settings.worker.inference_threads
    mapped = settings.worker.mapped_weights

    def load_backend(version: str) -> Backend:
        from headway.worker.backends.onnx import OnnxBackend

        return OnnxBackend.load(
            loader.load(version), intra_op_threads=threads, mapped_weights=mapped
        )

    # Resolved on the first question, from the worker's start (which waits for the
    # registry), not here: building a worker reads no database.
    names = functools.partial(model_names_for, settings, registry)
    kind = None if settings.worker.models else POOL_KINDS[settings.worker.pool]
    return RefusingSource(RegistrySource(registry, names, load_backend, kind))


def build_worker(settings: Settings) -> tuple[App, WorkerService]:
    worker = settings.worker
    limits = BatchLimits(
        max_batch_size=worker.max_batch_size,
        max_background_batch_size=worker.max_background_batch_size,
        max_batch_tokens=worker.max_batch_tokens,
        max_wait_s=worker.max_wait_ms / 1000,
        batch_wait=worker.batch_wait,
        max_queue_texts=worker.max_queue_texts,
    )
    metrics = WorkerMetrics(worker.pool)
    observability = settings.observability
    tracing = process_tracing(observability.tracing, f"worker-{worker.pool}", metrics.registry)
    service = WorkerService(
        worker.pool,
        model_source(settings),
        limits,
        registry_poll_s=worker.registry_poll_s,
        metrics=metrics,
        registry_retry_max_s=worker.registry_retry_max_s,
        memory_budget_bytes=(
            None if worker.memory_budget_mb is None else int(worker.memory_budget_mb * 1e6)
        ),
    )
    return build_worker_app(service, tracing, access_log=observability.logging.access), service
