"""The server's TLS handshake, begun by the connection's own protocol.

asyncio (and uvloop) run the handshake before a server's protocol sees the connection
when the server is created with ``ssl=``: a client that never sends its ClientHello is held
for the loop's 60 s, before any cap or timer of ours can count it. Here the server is
plain TCP and the protocol, once it has admitted the connection, wraps the transport
itself, as ``loop.start_tls`` does, but at once, inside ``connection_made``: nothing can be
read in between (uvloop starts reading as ``connection_made`` returns), and the protocol
is told ``connection_made`` a second time, with the TLS transport, as soon as the handshake
is done, before any application data. The loop's own SSL protocol does the work (uvloop's
in C where the loop is uvloop).
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio.sslproto import SSLProtocol
from typing import Any

import uvloop
import uvloop.loop

UVLOOP_SSL_PROTOCOL: Any = getattr(uvloop.loop, "SSLProtocol", None)
"""uvloop's own (what its ``create_server(ssl=...)`` would use); not in its type stubs."""


def wrap_server_side(
    loop: asyncio.AbstractEventLoop,
    raw: asyncio.Transport,
    app_protocol: asyncio.Protocol,
    context: ssl.SSLContext,
    timeout_s: float,
) -> asyncio.Future[None]:
    """Start the handshake on ``raw`` for ``app_protocol``; the future is done when it is:
    with ``None`` (``app_protocol.connection_made`` has been given the TLS transport), or
    with the error that ended it (``app_protocol`` hears nothing more; ``raw`` is closed).
    ``timeout_s`` is the loop's own bound, behind the caller's."""
    waiter: asyncio.Future[None] = loop.create_future()
    ssl_protocol: Any
    if UVLOOP_SSL_PROTOCOL is not None and isinstance(loop, uvloop.Loop):
        ssl_protocol = UVLOOP_SSL_PROTOCOL(
            loop,
            app_protocol,
            context,
            waiter,
            True,
            None,
            ssl_handshake_timeout=timeout_s,
            call_connection_made=True,
        )
    else:
        ssl_protocol = SSLProtocol(
            loop,
            app_protocol,
            context,
            waiter,
            server_side=True,
            ssl_handshake_timeout=timeout_s,  # type: ignore[arg-type]  # a float is fine
            call_connection_made=True,
        )
    raw.set_protocol(ssl_protocol)
    ssl_protocol.connection_made(raw)
    return waiter
