"""Where a pool's replicas are: a protocol, a fixed list, or a DNS name."""
