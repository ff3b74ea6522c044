"""compose.yaml: headway on one machine as containers, checked without running them.

The file against the Compose Specification's JSON schema (vendored in
deploy/kubernetes/schemas/compose, unknown keys refused); every headway command a real
command of the CLI with options it has; every long-running service health-checked and
started after what it needs is healthy; the environment made of real settings, loaded
with the secrets file ``make-secrets.sh compose`` writes; no secret in the file itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from headway.settings import GatewaySettings, load_settings
from tests.unit.repo.test_manifests import check_command, setting_field

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "compose.yaml"
SCHEMA = ROOT / "deploy" / "kubernetes" / "schemas" / "compose" / "compose-spec.json"
ONE_OFF = {"db-roles", "models-import"}
"""Run to completion once per start; the rest wait for them."""
HEADWAY_SERVICES = {
    *ONE_OFF,
    "gateway",
    "embed-worker",
    "rerank-worker",
    "billing",
    "executor",
}
SECRET_WORDS = re.compile(r"password|secret|token|key|credential", re.IGNORECASE)

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def compose() -> Doc:
    document: Doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def services(compose: Doc) -> dict[str, Doc]:
    found: dict[str, Doc] = compose["services"]
    return found


def headway_commands(service: Doc) -> list[list[str]]:
    """The headway invocations a service runs: its command, or each ``headway ...`` of a
    shell line (split at ``&&``, ``||`` and ``|``)."""
    command = service["command"]
    if service.get("entrypoint") != ["/bin/sh", "-c"]:
        return [command]
    (line,) = command
    words = shlex.split(line)
    runs: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", "|"):
            runs.append([])
        else:
            runs[-1].append(word)
    return [run[1:] for run in runs if run and run[0] == "headway"]


def test_compose_matches_the_compose_specification(compose: Doc) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    errors = [
        f"{'/'.join(map(str, error.path))}: {error.message}"
        for error in jsonschema.Draft7Validator(schema).iter_errors(compose)
    ]
    assert not errors, "\n".join(errors)


def test_it_runs_the_services_of_the_kubernetes_manifests(compose: Doc) -> None:
    data_services = {"postgres", "redis", "redis-cache", "nats"}
    assert set(services(compose)) == HEADWAY_SERVICES | data_services
    for name in HEADWAY_SERVICES:
        service = services(compose)[name]
        assert service["image"] == "headway:0.1.0" and service["build"] == "."
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
    for name in data_services:
        image = services(compose)[name]["image"]
        assert re.fullmatch(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), image


def test_quotas_and_cache_are_two_redis_instances_only_the_cache_evicting(
    compose: Doc,
) -> None:
    """Eviction is per instance (docs/redis.md): a bucket must never share one with the cache."""

    def option(name: str, flag: str) -> str:
        command = services(compose)[name]["command"]
        return str(command[command.index(flag) + 1])

    assert option("redis", "--maxmemory-policy") == "noeviction"
    assert option("redis-cache", "--maxmemory-policy") == "allkeys-lru"


def test_every_headway_command_exists_with_its_options(compose: Doc) -> None:
    for name in HEADWAY_SERVICES:
        runs = headway_commands(services(compose)[name])
        assert runs, f"{name} runs no headway command"
        for words in runs:
            check_command(words)
    import_runs = headway_commands(services(compose)["models-import"])
    assert [run[:2] for run in import_runs] == [
        ["models", "list"],
        ["models", "verify"],
        ["models", "import"],
    ]


def test_long_running_services_are_health_checked_and_wait_for_what_they_need(
    compose: Doc,
) -> None:
    all_services = services(compose)
    for name, service in all_services.items():
        if name not in ONE_OFF:
            test = service["healthcheck"]["test"]
            assert test[0] == "CMD" and len(test) > 1, name
        for needed, condition in service.get("depends_on", {}).items():
            assert needed in all_services, f"{name} depends on {needed}"
            wanted = condition["condition"]
            if needed in ONE_OFF:
                assert wanted == "service_completed_successfully", name
            else:
                assert wanted == "service_healthy", f"{name} -> {needed}"
                assert "healthcheck" in all_services[needed]
    # The headway services' checks read their own /readyz on the port they listen on.
    ports = {"gateway": 8080, "embed-worker": 9100, "rerank-worker": 9100}
    ports |= {"billing": 9300, "executor": 9400}
    for name, port in ports.items():
        assert all_services[name]["healthcheck"]["test"][-1] == f"http://127.0.0.1:{port}/readyz"
    needs = {name: set(service.get("depends_on", {})) for name, service in all_services.items()}
    # Postgres through db-roles: its roles exist before any component connects as one.
    assert needs["db-roles"] == {"postgres"}
    assert needs["models-import"] == {"db-roles"}
    assert {"db-roles", "redis", "redis-cache", "nats", "models-import"} <= needs["gateway"]
    assert {"db-roles", "models-import"} <= needs["embed-worker"]
    assert {"db-roles", "nats"} <= needs["billing"]
    assert {"db-roles", "nats", "gateway"} <= needs["executor"]


def test_no_secret_is_in_the_file(compose: Doc) -> None:
    """Secrets are files outside git (.headway/ is ignored), mounted as compose secrets."""
    for name, service in services(compose).items():
        for key, value in service.get("environment", {}).items():
            if SECRET_WORDS.search(key):
                assert key.endswith("_FILE") and value.startswith("/run/secrets/"), f"{name}: {key}"
            assert "@" not in str(value), f"{name}: {key} carries credentials"
    for secret in compose["secrets"].values():
        assert secret["file"].startswith(".headway/"), secret
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert ".headway/" in ignored


def test_its_settings_are_real_and_load_with_the_secrets_make_secrets_writes(
    compose: Doc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "compose"
    run = subprocess.run(
        [str(ROOT / "deploy" / "kubernetes" / "make-secrets.sh"), "compose", str(folder)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    # Readable by the containers' uid, in a folder no one else may enter.
    assert folder.stat().st_mode & 0o777 == 0o700
    for role in ("gateway", "worker", "billing", "executor", "db-owner"):
        assert (folder / f"{role}.toml").stat().st_mode & 0o777 == 0o644
    for name in HEADWAY_SERVICES:
        service = services(compose)[name]
        for key in list(os.environ):
            if key.startswith("HEADWAY_"):
                monkeypatch.delenv(key)
        for key, value in service["environment"].items():
            assert setting_field(key), f"{name}: {key} is not a headway setting"
            monkeypatch.setenv(key, value)
        (secret,) = [s for s in service["secrets"] if s["target"] == "headway.toml"]
        mounted = f"/run/secrets/{secret['target']}"
        config_at = next(run for run in headway_commands(service) if "--config" in run)
        assert config_at[config_at.index("--config") + 1] == mounted, name
        source = Path(compose["secrets"][secret["source"]]["file"]).name
        settings = load_settings(config_file=folder / source)
        assert settings.postgres_url is not None and "@postgres:5432/" in settings.postgres_url
        assert settings.redis_url == "redis://redis:6379/0"
        assert settings.redis.cache_url == "redis://redis-cache:6379/0"
        assert str(settings.data_dir) == "/var/lib/headway"
        assert service["volumes"] == ["headway-data:/var/lib/headway"]
        if name == "gateway":
            assert settings.gateway.embed_dns == "embed-worker:9100"
            assert settings.gateway.rerank_dns == "rerank-worker:9100"
            assert settings.gateway.id == "gateway"
            assert settings.batches.executor_token
        if name == "executor":
            assert settings.batches.executor.gateway_urls == ("http://gateway:8080",)
    # The superuser's password (the owner's URL) is in db-owner.toml alone.
    password = (folder / "postgres-password").read_text(encoding="utf-8")
    for role in ("gateway", "worker", "billing", "executor", "db-owner"):
        held = password in (folder / f"{role}.toml").read_text(encoding="utf-8")
        assert held == (role == "db-owner"), role
    postgres = services(compose)["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password"
    assert compose["secrets"]["postgres-password"]["file"].endswith("/postgres-password")


def test_the_gateways_metrics_are_on_their_own_port_published_on_loopback_only(
    compose: Doc,
) -> None:
    """/metrics is on the gateway's operations port (its default, listening on the
    container's addresses), published beside the client port, and nothing is published
    beyond this machine's loopback."""
    gateway = services(compose)["gateway"]
    assert gateway["environment"]["HEADWAY_GATEWAY__OPS_HOST"] == "0.0.0.0"
    assert "HEADWAY_GATEWAY__OPS_PORT" not in gateway["environment"]
    ops_port, port = GatewaySettings().ops_port, GatewaySettings().port
    assert gateway["ports"] == [f"127.0.0.1:{port}:{port}", f"127.0.0.1:{ops_port}:{ops_port}"]
    for name, service in services(compose).items():
        for published in service.get("ports", []):
            assert str(published).startswith("127.0.0.1:"), f"{name}: {published}"
