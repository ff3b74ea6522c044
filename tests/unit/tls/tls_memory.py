"""A TLS handshake between two contexts through memory buffers: real OpenSSL, no sockets."""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509

from headway.tls.folder import certificate_path


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str | None
) -> ssl.SSLObject:
    """The client's side once a byte has gone through both ways; raises the ``ssl.SSLError``
    of whichever side refused. With TLS 1.3 the server judges the client's certificate
    after the client has finished, so the exchange of data is part of the handshake here."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_side = client.wrap_bio(client_in, client_out, server_hostname=server_hostname)
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    pending = [client_side, server_side]
    for _ in range(10):
        for side in list(pending):
            try:
                side.do_handshake()
                pending.remove(side)
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if not pending:
            break
    assert not pending, "the handshake did not finish"
    client_side.write(b"ping")
    server_in.write(client_out.read())
    assert server_side.read() == b"ping"
    server_side.write(b"pong")
    client_in.write(server_out.read())
    assert client_side.read() == b"pong"
    return client_side


def peer_serial(client_side: ssl.SSLObject) -> int:
    der = client_side.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial_on_disk(directory: Path, name: str) -> int:
    return x509.load_pem_x509_certificate(
        certificate_path(directory, name).read_bytes()
    ).serial_number
