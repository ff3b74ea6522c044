"""Who a request comes from, as every mechanism that counts clients sees it.

``client_address`` is the one function: the connection caps (``http/guard.py``, from the
peer alone: no header has arrived yet), the failed-authentication limiter, the console and
the lockout log lines all count a client by what it answers.

- The peer is the client, whatever ``X-Forwarded-For`` says, unless the peer is one of the
  ``TrustedProxies`` (a CIDR list in settings). Behind such a proxy the client is the
  rightmost address in ``X-Forwarded-For`` that is not itself a trusted proxy: each proxy
  appends the address it saw, so everything left of that entry was written by the client
  and proves nothing. A header that is missing, or whose entry there is not an address,
  leaves the peer (the proxy) as the client: never a value the client chose.
- An IPv4 address is counted as itself; an IPv6 address by its /64 (one host is routinely
  given a whole /64, so counting each of its addresses apart would give it 2⁶⁴ of
  everything); an IPv4-mapped IPv6 address as the IPv4 address it maps.

No proxy is trusted by default: uvicorn's own handling of these headers (which trusts
127.0.0.1) is switched off in ``serve.py``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from functools import lru_cache

UNKNOWN = "unknown"
"""The address of a connection with no peer address (a Unix socket)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class TrustedProxies:
    """The networks whose ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed."""

    def __init__(self, cidrs: Iterable[str] = ()) -> None:
        self.networks: tuple[Network, ...] = tuple(
            ipaddress.ip_network(cidr, strict=False) for cidr in cidrs
        )

    def __bool__(self) -> bool:
        return bool(self.networks)

    def __contains__(self, host: object) -> bool:
        if not self.networks or not isinstance(host, str):
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


NO_PROXIES = TrustedProxies()


@lru_cache(maxsize=4096)
def counted_as(host: str) -> str:
    """What an address is counted as: IPv4 itself, IPv6 its /64; anything else (a name,
    ``unknown``) as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def client_address(
    peer: str | None, forwarded_for: str | None = None, trusted: TrustedProxies = NO_PROXIES
) -> str:
    """The client of a connection from ``peer`` that says ``forwarded_for`` (the
    ``X-Forwarded-For`` header, None where there is none or none has arrived), counted as
    ``counted_as`` says."""
    if not peer:
        return UNKNOWN
    if forwarded_for and trusted and peer in trusted:
        for entry in reversed(forwarded_for.split(",")):
            hop = entry.strip()
            if hop not in trusted:
                return counted_as(hop) if _is_address(hop) else counted_as(peer)
            peer = hop  # every hop so far is a trusted proxy: the client is further left
    return counted_as(peer)


def request_client(
    scope: Mapping[str, object], headers: Mapping[str, str], trusted: TrustedProxies
) -> str:
    """``client_address`` of an ASGI request: its scope's peer and its headers."""
    client = scope.get("client")
    peer = str(client[0]) if isinstance(client, tuple | list) and client else None
    return client_address(peer, headers.get("x-forwarded-for"), trusted)


def request_scheme(
    scope: Mapping[str, object], headers: Mapping[str, str], trusted: TrustedProxies
) -> str:
    """``https`` or ``http``: the connection's own, or a trusted proxy's
    ``X-Forwarded-Proto`` (the scheme the client used to reach it)."""
    scheme = str(scope.get("scheme", "http"))
    forwarded = headers.get("x-forwarded-proto", "").strip().lower()
    if forwarded in ("http", "https") and trusted:
        client = scope.get("client")
        if isinstance(client, tuple | list) and client and str(client[0]) in trusted:
            return forwarded
    return scheme


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
