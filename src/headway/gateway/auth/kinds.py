"""The names a route declares as its ``auth`` (``Route.auth``): how its caller is identified,
before its body is read. ``checks.py`` holds what each does; the console's session check
is the console's (``console/auth.py``)."""

from __future__ import annotations

TENANT_KEY = "tenant_key"
"""A tenant's API key → ``Caller`` (tenant, key id)."""
ANY_KEY = "any_key"
"""Any valid key, a tenant's or an admin's → ``Principal``."""
ADMIN_KEY = "admin_key"
"""An admin key → ``Principal`` (role admin)."""
EXECUTOR_TOKEN = "executor_token"
"""The batch executor's token, and the tenant its headers name → ``Caller`` (tier batch)."""
WEIGHTS_TOKEN = "weights_token"
"""The worker credential (``weights.token``), or an admin key → ``Principal`` or None."""
CONSOLE_SESSION = "console_session"
"""A console session cookie → ``Session``; without one, 401 (a page: the sign-in form)."""
