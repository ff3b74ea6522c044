"""The admin API under ``/admin/``: one module per resource, each with its bodies.

``tenants`` (and their keys), ``models``, ``aliases``, ``splits``, ``rollouts`` and
``audit``; ``access`` is what they share (the admin key, the store off the event loop,
the snapshot refreshed after a write), ``body`` decodes strict request bodies and
``refusals`` is the one table from a registry refusal to an HTTP error. Every write
is made in the name of ``Actor(admin key id, request id)``, so the audit log says who
did it and on which request.
"""
