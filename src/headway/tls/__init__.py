"""TLS to clients, mutual TLS between the gateway and its workers, certificates that reload.

- ``names``: the role names certificates carry (``worker.headway.internal``)
- ``certs``: an internal CA and the leaf certificates of each role (ECDSA P-256)
- ``folder``: a certificates folder on disk (``headway certs init | issue``)
- ``contexts``: ``ssl.SSLContext`` builders, TLS 1.2 or newer, server and client
- ``reload``: a context that follows its files on disk, for servers and clients
- ``hops``: which context each hop uses, from the ``tls`` settings

See docs/tls.md for what each hop verifies.
"""
