"""With internal TLS, replicas found through DNS are called at https:// URLs."""

from __future__ import annotations

from types import SimpleNamespace

from headway.app.process import discovery
from headway.gateway.discovery.dns_name import DnsDiscovery
from headway.settings import GatewaySettings


class Answer:
    """What dnspython's resolver answers: records with an ``address``."""

    def __init__(self, *addresses: str) -> None:
        self.records = [SimpleNamespace(address=a) for a in addresses]

    def __iter__(self):
        return iter(self.records)


async def test_dns_addresses_take_the_scheme_of_the_pool():
    for scheme in ("http", "https"):
        source = DnsDiscovery("embed.headway.test:9100", scheme=scheme)

        async def resolve(name: str, kind: str) -> Answer:
            assert (name, kind) == ("embed.headway.test", "A")
            return Answer("10.0.0.2", "10.0.0.1")

        source._resolver.resolve = resolve
        assert await source.addresses() == [
            f"{scheme}://10.0.0.1:9100",
            f"{scheme}://10.0.0.2:9100",
        ]


def test_the_gateway_builds_https_dns_sources_when_internal_tls_is_on():
    settings = GatewaySettings(embed_dns="embed.headway.test:9100")
    [(pool, source)] = discovery(settings, "https").items()
    assert pool == "embed" and isinstance(source, DnsDiscovery) and source.scheme == "https"
    [(_, plain)] = discovery(settings).items()
    assert isinstance(plain, DnsDiscovery) and plain.scheme == "http"
