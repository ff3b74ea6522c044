"""The names certificates carry: each role's, under one internal domain.

The gateway dials workers by address (Kubernetes pod IPs change), so it checks a
worker's certificate for ``WORKER_NAME``, sent as the TLS server name, not for the
address. Serving needs only these names and the ``ssl`` module; making certificates
(``certs``) needs ``cryptography``.
"""

from __future__ import annotations

INTERNAL_DOMAIN = "headway.internal"


def role_name(role: str) -> str:
    """``worker`` -> ``worker.headway.internal``."""
    return f"{role}.{INTERNAL_DOMAIN}"


WORKER_NAME = role_name("worker")
