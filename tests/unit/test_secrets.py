"""Least privilege for secrets: each container gets only the secrets its role uses.

What a role *uses* is read from the code: the headway modules its command imports
(statically, function-level imports included, from the module that builds it), and which
secret settings those modules name. The table ``USES`` says it explicitly and is checked
against that, so a role that starts reading a new secret fails here until the table, and
what make-secrets.sh writes for it, say so. Then, in both overlays and in compose.yaml:
each container mounts its own role's secret and no other (TLS certificates apart: their
items are checked per role in test_manifests.py), and the file make-secrets.sh writes for
that role sets no secret setting outside ``USES``.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

import pytest
import yaml
from pydantic import BaseModel

from headway.privileges import COMPONENTS, role_name
from headway.settings import Settings
from tests.unit.repo.test_layers import imports_of
from tests.unit.repo.test_manifests import (
    K8S,
    OVERLAYS,
    ROLES,
    Doc,
    all_containers,
    component,
    headway_deployments,
    pod_spec,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

SECRETS = {
    "postgres_url": r"\bpostgres_url\b",
    "redis_url": r"\bredis_url\b",
    "redis.quota.password": r"\bredis\.quota\b",
    "redis.cache_url": r"\bredis\.cache_url\b",
    "redis.cache.password": r"\bredis\.cache\b",
    "nats_url": r"\bnats_url\b",
    "batches.executor_token": r"\bexecutor_token\b",
    "weights.token": r"\bweights\.token\b",
    "observability.console.session_secret": r"\bsession_secret\b",
    "billing.export_api_key": r"\bexport_api_key\b",
}
"""The settings that are secrets (the URLs carry credentials), and how code names them."""

ENTRY = {
    "gateway": "headway.app.process",
    "worker": "headway.worker.main",
    "billing": "headway.billing.service",
    "executor": "headway.batches.service",
}
"""The module that builds each role's process from its settings."""

USES = {
    "gateway": {
        "postgres_url",  # registry, ledger (/v1/usage), batch store, quality references
        "redis_url",  # shared quotas, failed keys (the quota instance)
        "redis.quota.password",  # its password, when not in the URL
        "redis.cache_url",  # the results cache's own instance
        "redis.cache.password",
        "nats_url",  # the usage relay
        "batches.executor_token",  # checks the executors' calls
        "weights.token",  # checks the workers' weight fetches
        "observability.console.session_secret",  # signs console sessions
    },
    "worker": {"postgres_url", "weights.token"},  # registry; presents the token
    "billing": {"postgres_url", "nats_url", "billing.export_api_key"},
    "executor": {"postgres_url", "nats_url", "batches.executor_token"},
}
OWNER_USES = {"postgres_url"}
"""The owner's file (db-owner.toml): compose.yaml's one-off db-roles and models-import
(`headway db roles`, `headway models list | verify | import`), the Job headway-db-roles."""


def module_file(name: str) -> Path | None:
    path = SRC.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported(name: str, path: Path) -> set[str]:
    return {module for module in imports_of(name, path) if module.split(".")[0] == "headway"}


@cache
def closure(root: str) -> frozenset[str]:
    """``root`` and every headway module it imports, directly or not."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        todo += imported(name, path)
    return frozenset(seen)


def used_by_code(root: str) -> set[str]:
    """The secret settings the modules of ``root``'s closure name (the settings module,
    which declares them all, apart)."""
    text = "\n".join(
        path.read_text(encoding="utf-8")
        for name in closure(root) - {"headway.settings"}
        if (path := module_file(name)) is not None
    )
    return {field for field, pattern in SECRETS.items() if re.search(pattern, text)}


def set_secrets(config: dict[str, Any], prefix: str = "") -> set[str]:
    """The secret settings a TOML file of settings gives a value."""
    found: set[str] = set()
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            found |= set_secrets(value, f"{dotted}.")
        elif dotted in SECRETS and value not in ("", None):
            found.add(dotted)
    return found


def secret_like_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= secret_like_fields(annotation, f"{prefix}{name}.")
        elif re.search(r"(^|_)(token|secret|password|api_key)$", name) or name in (
            "postgres_url",
            "redis_url",
            "cache_url",
            "nats_url",
        ):
            found.add(f"{prefix}{name}")
    return found


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """make-secrets.sh's folder for each overlay and for compose."""
    env = {
        "PATH": "/usr/bin:/bin",
        "POSTGRES_URL": "postgresql://headway:pw@db.internal:5432/headway",
        "POSTGRES_URL_BILLING": "postgresql://billing:pw@db.internal:5432/headway",
        "REDIS_URL": "rediss://:pw@redis.internal:6380/0",
        "NATS_URL": "tls://nats.internal:4222",
    }
    out: dict[str, Path] = {}
    for mode in (*OVERLAYS, "compose"):
        folder = tmp_path_factory.mktemp(mode) / "secrets"
        run = subprocess.run(
            [str(K8S / "make-secrets.sh"), mode, str(folder)],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
        out[mode] = folder
    return out


def file_secrets(path: Path) -> set[str]:
    return set_secrets(tomllib.loads(path.read_text(encoding="utf-8")))


def test_every_secret_setting_is_known_here() -> None:
    """A new secret setting must be classified above before any role may be given it."""
    assert secret_like_fields(Settings) == set(SECRETS)


@pytest.mark.parametrize("role", sorted(ENTRY))
def test_the_table_of_what_each_role_uses_is_what_its_code_reads(role: str) -> None:
    assert used_by_code(ENTRY[role]) == USES[role]


def test_the_owners_commands_read_the_database() -> None:
    assert used_by_code("headway.cli.catalog") >= OWNER_USES
    assert used_by_code("headway.cli.db") >= OWNER_USES


@pytest.mark.parametrize("mode", [*OVERLAYS, "compose"])
def test_each_roles_file_holds_only_the_secrets_it_uses(
    written: dict[str, Path], mode: str
) -> None:
    for role, uses in USES.items():
        given = file_secrets(written[mode] / f"{role}.toml")
        assert given <= uses, f"{mode} {role}.toml: {sorted(given - uses)} it does not use"
        assert "postgres_url" in given, f"{mode} {role}.toml"
    if mode != "prod":
        assert file_secrets(written[mode] / "db-owner.toml") == OWNER_USES
    if mode == "prod":
        billing = tomllib.loads((written[mode] / "billing.toml").read_text(encoding="utf-8"))
        gateway = tomllib.loads((written[mode] / "gateway.toml").read_text(encoding="utf-8"))
        # Each role's own database URL where one is given, the shared one otherwise.
        assert billing["postgres_url"].startswith("postgresql://billing:")
        assert gateway["postgres_url"].startswith("postgresql://headway:")


def database_url(path: Path) -> SplitResult:
    return urlsplit(tomllib.loads(path.read_text(encoding="utf-8"))["postgres_url"])


@pytest.mark.parametrize("mode", [m for m in (*OVERLAYS, "compose") if m != "prod"])
def test_each_role_connects_as_its_own_postgres_role_and_only_the_owner_as_the_owner(
    written: dict[str, Path], mode: str
) -> None:
    """The roles `headway db roles` makes (``<prefix>_<component>``) with the passwords
    it is given (db-roles/): a role's URL names its own, never the owner's."""
    folder = written[mode]
    owner = database_url(folder / "db-owner.toml")
    assert (owner.username, owner.password) == (
        "headway",
        (folder / "postgres-password").read_text(encoding="utf-8"),
    )
    passwords = {
        path.name: path.read_text(encoding="utf-8") for path in (folder / "db-roles").iterdir()
    }
    assert sorted(passwords) == sorted(COMPONENTS)
    for component_name in COMPONENTS:
        url = database_url(folder / f"{component_name}.toml")
        assert url.username == role_name("headway", component_name), mode
        assert url.password == passwords[component_name], mode
        assert (url.hostname, url.path) == (owner.hostname, owner.path)
    assert len(set(passwords.values()) | {owner.password}) == len(COMPONENTS) + 1


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    out: dict[str, list[Doc]] = {}
    for overlay in OVERLAYS:
        run = subprocess.run(
            ["kubectl", "kustomize", str(K8S / "overlays" / overlay)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        out[overlay] = [doc for doc in yaml.safe_load_all(run.stdout) if doc]
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_pod_mounts_its_own_roles_secret_and_no_other(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    secrets_of_roles: dict[str, str] = {}
    for workload in headway_deployments(rendered[overlay]):
        role = ROLES[component(workload)]
        mounted = {
            volume["secret"]["secretName"]: volume["secret"].get("items")
            for volume in pod_spec(workload).get("volumes", [])
            if "secret" in volume
        }
        mounted.pop("headway-tls", None)  # certificates: items per role (test_manifests.py)
        assert list(mounted) == [f"headway-secrets-{role}"], f"{component(workload)}: {mounted}"
        (items,) = mounted.values()
        assert [item["key"] for item in items] == [f"{role}.toml"]
        secrets_of_roles.setdefault(role, f"headway-secrets-{role}")
        for container in all_containers(workload):
            for source in container.get("envFrom", []):
                assert "secretRef" not in source, f"{component(workload)}: {source}"
            for variable in container.get("env", []):
                reference = variable.get("valueFrom", {})
                assert "secretKeyRef" not in reference, f"{component(workload)}: {variable}"
    assert len(set(secrets_of_roles.values())) == len(USES)


def test_each_compose_container_mounts_its_own_roles_secret_and_no_other(
    written: dict[str, Path],
) -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    files = {
        name: str(Path(secret["file"]).relative_to(".headway/compose"))
        for name, secret in compose["secrets"].items()
    }
    one_off = compose["services"]["db-roles"]
    # The owner's URL and every role's password: the roles' maker alone.
    assert {secret["source"] for secret in one_off["secrets"]} == {
        "db-owner",
        *(f"db-password-{c}" for c in COMPONENTS),
    }
    for secret in one_off["secrets"]:
        if secret["source"] != "db-owner":
            assert files[secret["source"]] == f"db-roles/{Path(secret['target']).name}"
    role_of = {
        "models-import": "db-owner",
        "gateway": "gateway",
        "embed-worker": "worker",
        "rerank-worker": "worker",
        "billing": "billing",
        "executor": "executor",
    }
    for name, service in compose["services"].items():
        if name not in role_of:
            continue
        (secret,) = service["secrets"]
        assert files[secret["source"]] == f"{role_of[name]}.toml", name
        assert secret["target"] == "headway.toml", name
        uses = OWNER_USES if role_of[name] == "db-owner" else USES[role_of[name]]
        given = file_secrets(written["compose"] / files[secret["source"]])
        assert given <= uses, f"{name}: {sorted(given - uses)}"
        for key, value in service.get("environment", {}).items():
            # A URL in the environment (every container's) carries no credentials.
            assert not (key.endswith("_URL") and "@" in str(value)), f"{name}: {key}"
        # Every component starts once its role and grants exist.
        if role_of[name] != "db-owner":
            assert service["depends_on"]["db-roles"] == {
                "condition": "service_completed_successfully"
            }, name
