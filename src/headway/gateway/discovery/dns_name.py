"""A pool whose replicas are the A records of a DNS name (``--embed-dns NAME:PORT``).

A Kubernetes headless service answers its name with one A record per ready pod;
every replica listens on the same port. ``DnsDiscovery`` turns the answer into
base URLs: https:// ones with internal TLS, where the gateway checks each worker's
certificate by the role name it carries, not by the pod address (``headway.tls.certs``).
A name that does not exist (NXDOMAIN) is an empty pool; a lookup that fails (timeout,
no server) is ``DiscoveryFailed``.
"""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.resolver

from headway.gateway.discovery.base import DiscoveryFailed


def parse_target(target: str) -> tuple[str, int]:
    """``name:port`` → (name, port)."""
    name, sep, port = target.rpartition(":")
    if not sep or not name or not port.isdigit():
        raise ValueError(f"expected NAME:PORT, got {target!r}")
    return name, int(port)


class DnsDiscovery:
    def __init__(
        self,
        target: str,
        *,
        nameserver: str | None = None,
        timeout_s: float = 1.0,
        scheme: str = "http",
    ) -> None:
        """``scheme``: https when the workers serve mutual TLS (``tls.ca`` set)."""
        self.name, self.port = parse_target(target)
        self.scheme = scheme
        if nameserver is None:
            self._resolver = dns.asyncresolver.Resolver()
        else:
            host, port = parse_target(nameserver)
            self._resolver = dns.asyncresolver.Resolver(configure=False)
            self._resolver.nameservers = [host]
            self._resolver.port = port
        self._resolver.lifetime = timeout_s
        self._resolver.cache = None

    async def addresses(self) -> list[str]:
        try:
            answer = await self._resolver.resolve(self.name, "A")
        except dns.resolver.NXDOMAIN:
            return []
        except (dns.exception.DNSException, OSError) as exc:
            raise DiscoveryFailed(f"resolving {self.name}: {type(exc).__name__}") from exc
        return sorted(f"{self.scheme}://{record.address}:{self.port}" for record in answer)
