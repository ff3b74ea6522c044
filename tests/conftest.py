"""Every test carries exactly one tier marker, given by the folder it lives in.

- ``unit``: one mechanism alone, with fakes and a fake clock; milliseconds.
- ``service``: components driven in this process, on loopback sockets at most, or
  against one throw-away redis-server; well under a second a test.
- ``e2e``: the real thing: ``headway up`` processes, dnsmasq, the real model checked
  against sentence-transformers on torch; seconds a test.

``make test-fast`` runs ``-m "unit or service"``, ``make test`` every tier. A test may
name its tier itself (``pytestmark = pytest.mark.e2e``), which wins over its folder's;
a test in a folder missing from ``TIERS`` that names none fails collection, so a new
folder has to choose its tier here.

A test file that checks figures measured under load against goals marks itself
``alone`` too: ``make test`` runs everything else on every core, then those one at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.postgres_fixtures"]  # one throw-away Postgres for every folder

TIER_NAMES = frozenset({"unit", "service", "e2e"})

# The folder under tests/ -> its tier (measured when chosen, 2 cores: each service folder
# takes seconds in all; models ~45 s and e2e ~90 s).
TIERS = {
    "unit": "unit",
    "service": "service",  # gateway and workers as ASGI apps
    "loadgen": "service",  # the load generator against asyncio servers
    "quota": "service",  # the Redis store against a real redis-server
    "metering": "service",  # the outbox, the relay, JetStream against a real nats-server
    "billing": "service",  # ledgers (SQLite, a throw-away Postgres), consumer, invoices
    "registry": "service",  # the registry on SQLite and a throw-away Postgres
    "batches": "service",  # the batch store on SQLite and a throw-away Postgres
    "batches_queue": "service",  # the work queue on SQLite and a real nats-server
    "cache": "service",  # the results cache's Redis tier against a real redis-server
    "models": "e2e",  # ONNX graphs built and compared with torch
    "e2e": "e2e",  # real processes, the real model
}

TESTS_DIR = Path(__file__).parent


def folder_of(item: pytest.Item) -> str | None:
    try:
        parts = item.path.relative_to(TESTS_DIR).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems: list[str] = []
    for item in items:
        named = {mark.name for mark in item.iter_markers() if mark.name in TIER_NAMES}
        if len(named) > 1:
            problems.append(f"{item.nodeid}: more than one tier ({', '.join(sorted(named))})")
        elif not named:
            tier = TIERS.get(folder_of(item) or "")
            if tier is None:
                problems.append(f"{item.nodeid}: no tier (add its folder to TIERS)")
            else:
                item.add_marker(tier)
    if problems:
        raise pytest.UsageError(
            "every test needs exactly one tier marker (tests/conftest.py):\n  "
            + "\n  ".join(problems)
        )


@pytest.fixture(autouse=True)
def _a_fatal_background_task_fails_its_test(monkeypatch: pytest.MonkeyPatch):
    """A service under test whose essential task dies would ``os._exit(70)``, taking the
    whole pytest run down without a report: here it fails the test that caused it."""
    import headway.background

    fatal: list[str] = []
    monkeypatch.setattr(headway.background, "exit_now", fatal.append)
    yield
    assert not fatal, f"background tasks died, which stops a real process (exit 70): {fatal}"
