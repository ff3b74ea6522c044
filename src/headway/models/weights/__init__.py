"""Weights stores: how a machine gets an artifact it lacks, by its version, verified.

- ``base``: the ``WeightsSource`` protocol (a listing and ranged reads), the listing.
- ``directory``: another local store as a source (a shared volume; tests).
- ``http``: a gateway's ``/v1/weights`` routes as a source.
- ``fetch``: stream an artifact into the local store, resumable, verified, then ``put``.
- ``signing``: ed25519 keys, signatures over versions, and the load-time policy.
- ``load``: what a worker does before it loads a version: fetch if missing, verify.
"""
