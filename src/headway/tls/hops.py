"""Which TLS context each hop uses, from the ``tls`` settings; all of them reload.

    hop                    server presents        server checks         client checks
    client  -> gateway     public_cert            nothing (API keys);   its own trust
                                                  a cert of tls.ca if
                                                  sent (internal TLS)
    gateway -> worker      worker's cert          a cert of tls.ca      chain to tls.ca only,
                                                  with clientAuth,      name worker.headway.internal
                                                  naming one of
                                                  tls.worker_callers
    executor, up -> gw     public_cert            its token; on line    system roots + tls.ca
                                                  routes its identity
                                                                        (+ public_cert, pinned)

Each answers None when its part of ``tls`` is not set: the hop stays plain HTTP (or,
for an https:// gateway, the client library's own verification). A file that cannot
be loaded at start raises ``TlsFilesInvalid``.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from headway.settings import TlsSettings
from headway.tls.contexts import client_context, server_context
from headway.tls.reload import ContextSource, ReloadingContext


def public_server(tls: TlsSettings) -> ssl.SSLContext | None:
    """The gateway's listener: its public certificate; with internal TLS too, a client
    certificate of ``tls.ca`` asked for but not required (the executor's, which its line
    routes check: ``tls.line_callers``)."""
    if tls.public_cert is None or tls.public_key is None:
        return None
    cert, key, ca = tls.public_cert, tls.public_key, tls.ca
    files = (cert, key) if ca is None else (cert, key, ca)
    return ReloadingContext(
        lambda: server_context(cert, key, client_ca=ca, optional=True),
        files,
        interval_s=tls.reload_interval_s,
        what="public",
    ).serving()


def line_callers(tls: TlsSettings) -> frozenset[str] | None:
    """The identities the gateway's batch line routes require of a client certificate:
    where its client port asks for one (``public_server`` with internal TLS); None: none."""
    return frozenset(tls.line_callers) if tls.public and tls.internal else None


def internal_server(tls: TlsSettings) -> ssl.SSLContext | None:
    """A worker's listener: its certificate, and a client certificate of the CA required."""
    files = _internal(tls)
    if files is None:
        return None
    ca, cert, key = files
    return ReloadingContext(
        lambda: server_context(cert, key, client_ca=ca),
        files,
        interval_s=tls.reload_interval_s,
        what="internal server",
    ).serving()


def internal_client(tls: TlsSettings) -> ContextSource | None:
    """The gateway's calls to workers: only the internal CA is trusted (send
    ``server_hostname=names.WORKER_NAME``), and this process's certificate is presented."""
    files = _internal(tls)
    if files is None:
        return None
    ca, cert, key = files
    return ReloadingContext(
        lambda: client_context(ca=ca, cert=cert, key=key),
        files,
        interval_s=tls.reload_interval_s,
        what="internal client",
    )


def gateway_client(tls: TlsSettings) -> ContextSource | None:
    """Calls to an https:// gateway (the batch executor, ``headway up``'s readiness
    checks, a worker fetching weights): the system's roots and the internal CA, the
    gateway's own public certificate where this process has it, and this process's
    certificate should the gateway ask for one."""
    if not (tls.internal or tls.public):
        return None
    ca, cert, key, pinned = tls.ca, tls.cert, tls.key, tls.public_cert
    files = tuple(path for path in (ca, cert, key, pinned) if path is not None)
    return ReloadingContext(
        lambda: client_context(ca=ca, cert=cert, key=key, system_roots=True, pinned=pinned),
        files,
        interval_s=tls.reload_interval_s,
        what="gateway client",
    )


def _internal(tls: TlsSettings) -> tuple[Path, Path, Path] | None:
    if tls.ca is None or tls.cert is None or tls.key is None:
        return None
    return tls.ca, tls.cert, tls.key
