"""Who is calling, by the names in its certificate, and whether it may.

A handshake that requires a client certificate of the internal CA proves only that the CA
signed it, for any role: the executor's, the gateway's, or any role ``headway certs`` ever
issues. A listener that serves one kind of caller also names the identities it accepts
(``tls.worker_callers``, ``tls.line_callers``): the caller's certificate must carry one
of them as a DNS subject alternative name (or, lacking SANs, as its common name, as
OpenSSL's own host check does). Names compare case-insensitively and exactly: no
wildcards, so ``*.headway.internal`` in a certificate is no identity here.

Pure: a function of the certificate as ``ssl.SSLSocket.getpeercert()`` decodes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PEER_EXTENSION = "headway.tls_peer"
"""The ASGI scope extension holding the connection's peer names (a frozenset; absent on a
connection without a verified client certificate)."""


def peer_names(peercert: dict[str, Any] | None) -> frozenset[str]:
    """The identities ``peercert`` carries: its DNS SANs, else its common names; none for
    no certificate (``getpeercert()`` is empty when the client sent none)."""
    if not peercert:
        return frozenset()
    sans = [value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"]
    if sans:
        return frozenset(name.lower() for name in sans if "*" not in name)
    common = [
        value
        for rdn in peercert.get("subject", ())
        for key, value in rdn
        if key == "commonName" and "*" not in value
    ]
    return frozenset(name.lower() for name in common)


def accepted(names: frozenset[str], allowed: Iterable[str]) -> bool:
    """Whether a peer with ``names`` is one of ``allowed``."""
    return not names.isdisjoint(name.lower() for name in allowed)
