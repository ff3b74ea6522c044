"""``ssl.SSLContext`` builders from certificate files: TLS 1.2 or newer, nothing else.

- ``server_context(cert, key)``: serves ``cert``; with ``client_ca`` it also requires a
  client certificate that chains to that CA and carries clientAuth (OpenSSL checks the
  usage), refusing anyone else in the handshake.
- ``client_context(...)``: verifies the server's chain (against ``ca``, and the system's
  roots where asked) and its name (the URL's host, or the ``server_hostname`` the
  caller sends); presents ``cert``/``key`` when a server asks for a client certificate.

A file that cannot be used is a ``TlsFilesInvalid`` naming it.
"""

from __future__ import annotations

import ssl
from pathlib import Path


class TlsFilesInvalid(Exception):
    """A certificate, key or CA file cannot be loaded (missing, unreadable, not PEM, or a
    key that does not match its certificate)."""


def server_context(
    cert: Path, key: Path, client_ca: Path | None = None, *, optional: bool = False
) -> ssl.SSLContext:
    """``optional``: a client certificate is asked for but not required; one that is sent
    must still chain to ``client_ca`` (the gateway's client port: the executor's)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_OPTIONAL if optional else ssl.CERT_REQUIRED
        _load_ca(context, client_ca)
    return context


def client_context(
    *,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    system_roots: bool = False,
    pinned: Path | None = None,
) -> ssl.SSLContext:
    """``pinned``: a leaf certificate trusted as it is (the gateway's own public one, for
    the processes ``headway up`` runs beside it), whoever signed it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if system_roots:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if ca is not None:
        _load_ca(context, ca)
    if pinned is not None:
        _load_ca(context, pinned)
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if cert is not None and key is not None:
        _load_chain(context, cert, key)
    return context


def _load_chain(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFilesInvalid(f"{cert} with {key}: {_reason(exc)}") from exc


def _load_ca(context: ssl.SSLContext, ca: Path) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFilesInvalid(f"{ca}: {_reason(exc)}") from exc


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    return exc.strerror or type(exc).__name__
