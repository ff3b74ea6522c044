"""The docs' journeys run as written: the commands a new operator copies out of the README
and the guides it links, parsed out of the Markdown and run with bash against a real
``headway up`` on a fresh data directory.

A journey is every ``sh`` block that follows a ``<!-- journey: NAME -->`` line, across
README.md, CONTRIBUTING.md and docs/*.md in that order. Each runs in the directory where
``headway up`` runs (so the default ``./.headway`` is the data directory its commands find),
with ``headway`` on PATH as after ``. .venv/bin/activate``; the only change made to what the
docs say is the gateway's port (``localhost:8080`` becomes the port ``up`` took). A command
that fails fails its journey (``set -euo pipefail``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import build_tiny_sentence_transformer
from tests.e2e.conftest import start_up
from tests.models.conftest import EVAL_TEXTS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
JOURNEYS = ("first-request", "add-tenant", "import-model", "canary", "batch", "invoice")
"""What the first hour holds, in the order an operator meets it."""
MARKED_BLOCK = re.compile(r"^<!-- journey: ([a-z0-9-]+) -->\n```sh\n(.*?)^```", re.M | re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def journeys(paths: list[Path]) -> dict[str, list[str]]:
    """Each journey's blocks, in document order."""
    found: dict[str, list[str]] = {}
    for path in paths:
        if path.exists():
            for name, block in MARKED_BLOCK.findall(path.read_text(encoding="utf-8")):
                found.setdefault(name, []).append(block)
    return found


def test_the_docs_mark_every_journey_of_the_first_hour(tmp_path: Path) -> None:
    found = journeys(documents())
    assert sorted(found) == sorted(JOURNEYS), "journeys marked in the docs"
    assert all(block.strip() for blocks in found.values() for block in blocks)
    planted = tmp_path / "planted.md"
    planted.write_text("<!-- journey: other -->\n```sh\necho hi\n```\n", encoding="utf-8")
    assert journeys([planted]) == {"other": ["echo hi\n"]}  # the parser can find one


def operator_env(bin_dir: Path) -> dict[str, str]:
    """The shell of an operator who activated the venv: no HEADWAY_* of the test run's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HEADWAY_")}
    return env | {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}


def test_the_first_hour_runs_as_the_docs_write_it(tmp_path: Path) -> None:
    blocks = journeys(documents())
    workdir = tmp_path / "operator"  # no data dir: `headway up` makes it, as on a first run
    workdir.mkdir()
    build_tiny_sentence_transformer(workdir / "my-model", "bert", corpus=EVAL_TEXTS)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "headway").exists(), "the console script of the installed package"
    # The registry's change counter read often, so a key just added works at the next call.
    up = start_up(
        workdir / ".headway", env={"HEADWAY_GATEWAY__REGISTRY_POLL_S": "0.05"}, timeout_s=240
    )
    try:
        address = up.url.removeprefix("http://")
        ran = {}
        for name in JOURNEYS:
            script = "".join(blocks[name]).replace("localhost:8080", address)
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=workdir,
                env=operator_env(bin_dir),
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert done.returncode == 0, (
                f"journey {name} failed ({done.returncode}):\n{script}\n--- stdout\n"
                f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
            )
            ran[name] = done.stdout
        assert '"embedding"' in ran["first-request"]
        assert "my-model" in ran["import-model"]
        assert '"tenant": "support-bot"' in ran["invoice"]
    finally:
        up.stop(signal.SIGTERM)
