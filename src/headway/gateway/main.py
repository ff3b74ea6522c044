"""Building a gateway from settings."""

from __future__ import annotations

from headway.gateway.app import build_gateway_app
from headway.gateway.service import GatewayService
from headway.gateway.transport import AiohttpTransport
from headway.http.asgi import App
from headway.registry.sqlite import Registry
from headway.settings import Settings


def build_gateway(settings: Settings) -> App:
    registry = Registry(settings.registry_path)
    service = GatewayService(
        settings=settings.gateway,
        load_snapshot=registry.snapshot,
        transport=AiohttpTransport(),
        embed_model=settings.embed_model,
        rerank_model=settings.rerank_model,
    )
    return build_gateway_app(service)
