"""``headway models keygen | sign | verify | fetch`` on a store in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from headway.cli import app
from headway.models.store import ModelStore
from headway.models.weights.signing import SignaturePolicy
from tests.weights_builders import stored_artifact, tamper


def models(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, ["models", *args], env=env)


def test_a_key_signs_a_version_that_verify_then_holds_to_the_trusted_keys(tmp_path: Path):
    store = ModelStore(tmp_path / "models")
    model = stored_artifact(store, graph=b"graph")
    made = models("keygen", "--out", str(tmp_path / "key.pem"))
    assert made.exit_code == 0, made.output
    public = made.output.strip()
    signed = models("sign", model.version, "--key", str(tmp_path / "key.pem"),
                    "--data-dir", str(tmp_path))  # fmt: skip
    assert signed.exit_code == 0, signed.output
    assert public in signed.output
    assert SignaturePolicy((public,), required=True).check(
        model.version, store.signature(model.version)
    )
    trusted = {"HEADWAY_WEIGHTS__TRUSTED_KEYS": f'["{public}"]',
               "HEADWAY_WEIGHTS__REQUIRE_SIGNATURE": "true"}  # fmt: skip
    ok = models("verify", model.version, "--data-dir", str(tmp_path), env=trusted)
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip().splitlines()[-1].split() == [model.version, str(model.path)]

    unsigned = stored_artifact(store, graph=b"another graph")
    refused = models("verify", unsigned.version, "--data-dir", str(tmp_path), env=trusted)
    assert refused.exit_code == 1
    assert "unsigned and weights.require_signature is on" in refused.output

    tamper(model.onnx_path)
    changed = models("verify", model.version, "--data-dir", str(tmp_path))
    assert changed.exit_code == 1
    assert "model.onnx has sha256" in changed.output
    again = models("sign", model.version, "--key", str(tmp_path / "key.pem"),
                   "--data-dir", str(tmp_path))  # fmt: skip
    assert again.exit_code == 1 and "sign failed" in again.output


def test_fetch_needs_somewhere_to_fetch_from(tmp_path: Path) -> None:
    answer = models("fetch", "ab" * 32, "--data-dir", str(tmp_path))
    assert answer.exit_code == 2
    assert "give --from URL or set weights.url" in answer.output
    unreachable = models("fetch", "ab" * 32, "--from", "http://127.0.0.1:1",
                         "--data-dir", str(tmp_path))  # fmt: skip
    assert unreachable.exit_code == 1
    assert "fetch failed: cannot reach the weights store at http://127.0.0.1:1" in (
        unreachable.output
    )
