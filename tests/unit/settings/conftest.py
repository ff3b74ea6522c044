"""Every test here starts from an environment without ``HEADWAY_*``: a variable in the
developer's shell can neither set a value under test nor be refused as unknown."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_headway_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HEADWAY_"):
            monkeypatch.delenv(name)
