"""The names a route declares as its ``auth`` (``Route.auth``): how its caller is identified,
before its body is read. ``checks.py`` holds what each does; the control plane's own
(the worker credential, a console session) are its mounts'."""

from __future__ import annotations

TENANT_KEY = "tenant_key"
"""A tenant's API key → ``Caller`` (tenant, key id)."""
ANY_KEY = "any_key"
"""Any valid key, a tenant's or an admin's → ``Principal``."""
ADMIN_KEY = "admin_key"
"""An admin key → ``Principal`` (role admin)."""
EXECUTOR_TOKEN = "executor_token"
"""The batch executor's token, and the tenant its headers name → ``Caller`` (tier batch)."""
