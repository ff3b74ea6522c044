"""`make sbom` writes a CycloneDX SBOM naming every locked package with its hashes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from packaging.utils import canonicalize_name

from tests.unit.repo.test_lock import HASH, MODEL, ROOT, RUNTIME


def locked_hashes() -> dict[str, set[str]]:
    hashes: dict[str, set[str]] = {}
    current = ""
    for lock in ("runtime.lock", "model.lock"):
        for line in (ROOT / "requirements" / lock).read_text().splitlines():
            stripped = line.strip()
            if "==" in stripped and not stripped.startswith("#"):
                current = canonicalize_name(stripped.split("==", 1)[0])
            elif HASH.fullmatch(stripped.rstrip(" \\")):
                hashes.setdefault(current, set()).add(stripped.split(":", 1)[1].rstrip(" \\"))
    return hashes


def test_the_sbom_names_every_locked_package_its_version_and_hashes(tmp_path: Path) -> None:
    out = tmp_path / "sbom.cdx.json"
    subprocess.run(["make", "-s", "sbom", f"SBOM={out}"], cwd=ROOT, check=True, timeout=300)
    bom = json.loads(out.read_text())
    assert (bom["bomFormat"], bom["specVersion"]) == ("CycloneDX", "1.6")
    assert bom["metadata"]["component"]["name"] == "headway"
    components = {canonicalize_name(c["name"]): c for c in bom["components"]}
    pinned = {**RUNTIME, **MODEL}
    assert set(components) == set(pinned)
    wanted_hashes = locked_hashes()
    for name, (version, _) in pinned.items():
        component = components[name]
        assert component["version"] == str(version)
        assert component["purl"] == f"pkg:pypi/{name}@{version}"
        listed = {
            h["content"]
            for ref in component.get("externalReferences", [])
            for h in ref.get("hashes", [])
            if h["alg"] == "SHA-256"
        }
        assert listed == wanted_hashes[name], name
