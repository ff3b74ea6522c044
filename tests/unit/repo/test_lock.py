"""The hashed locks `make up` installs from agree with pyproject.toml and are closed."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[3]
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s\\]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def read_lock(path: Path) -> dict[str, tuple[Version, int]]:
    """Package -> (pinned version, number of hashes), for a pip-compile/uv lock file."""
    pins: dict[str, tuple[Version, int]] = {}
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pin = PIN.match(stripped)
        if pin:
            current = canonicalize_name(pin.group(1))
            pins[current] = (Version(pin.group(2)), 0)
        elif HASH.fullmatch(stripped.rstrip(" \\")) and current is not None:
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        else:
            raise AssertionError(f"{path.name}: unexpected line {line!r}")
    return pins


RUNTIME = read_lock(ROOT / "requirements" / "runtime.lock")
MODEL = read_lock(ROOT / "requirements" / "model.lock")


def project_dependencies() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(r) for r in pyproject["project"]["dependencies"]]


def test_every_locked_package_has_a_hash_and_an_exact_version() -> None:
    for name, (_, hashes) in {**RUNTIME, **MODEL}.items():
        assert hashes >= 1, f"{name} has no --hash"


def test_every_runtime_dependency_is_locked_within_its_range() -> None:
    build = [Requirement(line) for line in _requirement_lines(ROOT / "requirements" / "build.in")]
    for requirement in [*project_dependencies(), *build]:
        name = canonicalize_name(requirement.name)
        assert name in RUNTIME, f"{name} is in pyproject.toml but not in runtime.lock: make lock"
        version, _ = RUNTIME[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"runtime.lock pins {name}=={version}, outside {requirement.specifier}: make lock"
        )


def test_the_model_package_is_locked_alone() -> None:
    wanted = {canonicalize_name(r) for r in _requirement_lines(ROOT / "requirements" / "model.in")}
    assert set(MODEL) == wanted


def test_the_lock_is_closed_over_the_installed_dependencies() -> None:
    """Each locked package, where this environment has that very version installed, asks
    only for packages the lock holds (pip checks the same when `make up` installs it)."""
    checked = 0
    for name, (version, _) in RUNTIME.items():
        try:
            installed = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(installed.version) != version:
            continue
        checked += 1
        for raw in installed.requires or []:
            requirement = Requirement(raw)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            assert canonicalize_name(requirement.name) in RUNTIME, (
                f"{name} {version} needs {requirement.name}, which runtime.lock lacks: make lock"
            )
    assert checked >= len(project_dependencies())  # the check ran over the real closure


def _requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]
