"""Service tier: the shared cache tier against a real, throw-away redis-server.

The ``redis_server`` fixture is the quota tests' (one server per test, checked gone
afterwards).
"""

from __future__ import annotations

from tests.quota.conftest import redis_server

__all__ = ["redis_server"]
