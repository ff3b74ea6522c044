"""Building a worker from settings: which backend, which model version."""

from __future__ import annotations

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway.http.asgi import App
from headway.models.errors import ModelNotFoundError
from headway.models.store import ModelStore
from headway.registry.sqlite import Registry
from headway.settings import Settings
from headway.worker.app import LoadedModel, WorkerService, build_worker_app
from headway.worker.batcher import BatchLimits
from headway.worker.metrics import WorkerMetrics


def model_name_for(settings: Settings, registry: Registry) -> str:
    """The worker's model: explicit, else the pool's alias (rerank falls back to embed)."""
    worker = settings.worker
    if worker.model:
        return worker.model
    if worker.pool == "rerank" and registry.resolve_model(settings.rerank_model) is not None:
        return settings.rerank_model
    return settings.embed_model


def loader(settings: Settings) -> LoadedModel:
    """Runs in a thread at start-up: resolve the version once, then load that artifact."""
    worker = settings.worker
    registry = Registry(settings.registry_path)
    if worker.backend == "synthetic":
        from headway.worker.backends.synthetic import SyntheticBackend

        synthetic = synthetic_record(worker.synthetic)
        registry.add_model(synthetic, (SYNTHETIC_ALIAS,))
        backend = SyntheticBackend(
            call_ms=worker.synthetic.call_ms,
            text_ms=worker.synthetic.text_ms,
            dimensions=worker.synthetic.dimensions,
            hiccup_share=worker.synthetic.hiccup_share,
            hiccup_ms=worker.synthetic.hiccup_ms,
        )
        return LoadedModel(backend, synthetic.version)
    from headway.worker.backends.onnx import OnnxBackend

    name = model_name_for(settings, registry)
    record = registry.resolve_model(name)
    if record is None:
        raise ModelNotFoundError(f"model {name!r} is not registered; run `headway models import`")
    stored = ModelStore(settings.model_root).get(record.version)
    return LoadedModel(
        OnnxBackend.load(stored, intra_op_threads=worker.inference_threads), stored.version
    )


def build_worker(settings: Settings) -> tuple[App, WorkerService]:
    worker = settings.worker
    limits = BatchLimits(
        max_batch_size=worker.max_batch_size,
        max_batch_tokens=worker.max_batch_tokens,
        max_wait_s=worker.max_wait_ms / 1000,
        max_queue_texts=worker.max_queue_texts,
    )
    service = WorkerService(
        worker.pool, lambda: loader(settings), limits, metrics=WorkerMetrics(worker.pool)
    )
    return build_worker_app(service), service
