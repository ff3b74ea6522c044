"""The registry a process uses: Postgres in shared mode (``postgres_url``), else SQLite."""

from __future__ import annotations

from headway.registry.postgres import PostgresRegistry
from headway.registry.sqlite import Registry
from headway.registry.store import RegistryStore
from headway.settings import Settings


def open_registry(settings: Settings) -> RegistryStore:
    if settings.postgres_url:
        return PostgresRegistry(settings.postgres_url)
    return Registry(settings.registry_path)
