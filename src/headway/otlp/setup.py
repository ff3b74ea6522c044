"""A process's tracing from its settings: spans recorded and exported only with an endpoint."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from headway import __version__
from headway.otlp.exporter import ExporterCollector, OtlpExporter
from headway.settings import TracingSettings
from headway.tracing.spans import Tracer


@dataclass(frozen=True, slots=True)
class ProcessTracing:
    """The tracer of one process, and its exporter (None: tracing off)."""

    tracer: Tracer = field(default_factory=Tracer)
    exporter: OtlpExporter | None = None

    async def start(self) -> None:
        """Start exporting (a start-up hook: on the process's event loop)."""
        if self.exporter is not None:
            self.exporter.start()

    async def close(self) -> None:
        """Export what is buffered (at shutdown, after the last request)."""
        if self.exporter is not None:
            await self.exporter.close()


def process_tracing(
    settings: TracingSettings, service: str, registry: CollectorRegistry | None = None
) -> ProcessTracing:
    """``service``: gateway, worker-embed, ...; the exporter's counts go on ``registry``."""
    if settings.otlp_endpoint is None:
        return ProcessTracing()
    exporter = OtlpExporter(
        settings.otlp_endpoint,
        {
            "service.name": f"headway-{service}",
            "service.namespace": settings.service_namespace,
            "service.version": __version__,
            "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
        },
    )
    if registry is not None:
        registry.register(ExporterCollector(exporter))
    return ProcessTracing(Tracer(exporter, sample_ratio=settings.sample_ratio), exporter)
