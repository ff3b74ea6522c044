"""``make clean`` keeps the billing data in .headway/; only ``make clean-all`` with a
confirmation deletes it. Run on a copy of the Makefile in a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DATA = ["ledger.sqlite3", "ledger.sqlite3-wal", "outbox/gw-1.sqlite3", "registry.sqlite3"]
DATA += ["batches.sqlite3", "files/file-1", "backups/ledger-1.sqlite3"]
REBUILT = ["models/abc/model.onnx", "up.log", "run/gateway.pid"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".venv").mkdir()
    for name in DATA + REBUILT:
        path = tmp_path / ".headway" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return tmp_path


def make(
    checkout: Path, *args: str, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-C", str(checkout), *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def present(checkout: Path) -> set[str]:
    root = checkout / ".headway"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_clean_keeps_the_ledger_and_other_data_and_says_so(checkout: Path) -> None:
    done = make(checkout, "clean")
    assert done.returncode == 0, done.stderr
    assert present(checkout) == set(DATA)
    assert not (checkout / ".venv").exists()
    assert "kept the data in .headway/" in done.stdout and "ledger.sqlite3" in done.stdout


def test_clean_all_refuses_without_confirmation(checkout: Path) -> None:
    done = make(checkout, "clean-all")
    assert done.returncode != 0 and "CONFIRM=yes" in done.stdout
    assert present(checkout) == set(DATA + REBUILT)


def test_clean_all_asks_on_a_terminal_and_keeps_everything_unless_told_yes(checkout: Path) -> None:
    controller, terminal = os.openpty()
    try:
        os.write(controller, b"no\n")
        done = make(checkout, "clean-all", stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode != 0 and "Type yes" in done.stdout
    assert present(checkout) == set(DATA + REBUILT)


def test_clean_all_with_confirm_deletes_it(checkout: Path) -> None:
    done = make(checkout, "clean-all", "CONFIRM=yes")
    assert done.returncode == 0, done.stderr
    assert not (checkout / ".headway").exists() and not (checkout / ".venv").exists()
