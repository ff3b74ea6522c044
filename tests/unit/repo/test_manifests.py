"""The Kubernetes manifests of deploy/kubernetes, rendered as they are applied.

Each overlay is rendered once (``kubectl kustomize``) and checked three ways:

- every object against the Kubernetes API's OpenAPI schemas, strictly (an unknown field
  is an error, as with ``kubectl apply --validate=strict``), for a current release and
  the oldest one they are for; KEDA's objects against the CRDs vendored
  in deploy/kubernetes/schemas/keda, made strict the same way, and their triggers'
  metadata against the keys KEDA's scalers read (KEDA itself ignores a misspelled one);
- checkov, with no failed check (a skip is an annotation that says why);
- our own invariants: locked-down containers with requests, limits and probes on the
  health routes; a PDB for every workload; every flow the system has allowed by its
  NetworkPolicies at both ends, and flows it does not have refused; the workers' headless
  Services named by the gateways' DNS discovery; every setting a real one, loaded through
  ``load_settings`` with the files ``make-secrets.sh`` writes, and every file a setting
  names mounted from the right role's Secret; grace periods that cover the drain;
  ScaledObjects on metrics the code exports, in PromQL that parses.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import typer.core
import typer.main
import yaml

from headway.cli import app as headway_cli
from headway.gateway.discovery.dns_name import parse_target
from headway.settings import Settings, load_settings
from tests.unit.repo.test_alert_rules import check_queries

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "kubernetes"
KEDA = K8S / "schemas" / "keda"
TOOLS = ROOT / ".venv-tools" / "bin"
OVERLAYS = ("dev", "prod")
NAMESPACE = "headway"
# The oldest release the manifests are for (their preStop sleep action is on by default
# from 1.30), and the newest whose schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.33", kubernetes_validate.latest_version())
# The component label of each headway workload -> the role whose Secret files it mounts.
ROLES = {
    "gateway": "gateway",
    "embed-worker": "worker",
    "rerank-worker": "worker",
    "billing": "billing",
    "executor": "executor",
}
# The role -> whose internal certificate it presents (the billing consumer's is the
# executor's: both only call the gateways).
CERTIFICATE_OF = {
    "gateway": "gateway",
    "worker": "worker",
    "billing": "executor",
    "executor": "executor",
}

Doc = dict[str, Any]


def tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        pytest.fail(
            f"{name} is missing from .venv-tools: run `make test` (or `make test-fast`), "
            "which creates it with the linters the Makefile pins"
        )
    return str(path)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is not installed (Debian package kubectl): run `make prerequisites`")
    return found


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    out: dict[str, list[Doc]] = {}
    for overlay in OVERLAYS:
        run = subprocess.run(
            [kubectl(), "kustomize", str(K8S / "overlays" / overlay)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, f"kubectl kustomize {overlay}: {run.stderr}"
        out[overlay] = [doc for doc in yaml.safe_load_all(run.stdout) if doc]
    return out


@pytest.fixture(scope="module")
def secret_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What make-secrets.sh writes for each overlay: each role's Secret's file."""
    out: dict[str, Path] = {}
    for overlay in OVERLAYS:
        folder = tmp_path_factory.mktemp(overlay) / "secrets"
        env = {
            "PATH": os.environ["PATH"],
            "POSTGRES_URL": "postgresql://headway:pw@db.internal:5432/headway?sslmode=require",
            "REDIS_URL": "rediss://:pw@redis.internal:6380/0",
            "NATS_URL": "tls://nats.internal:4222",
        }
        run = subprocess.run(
            [str(K8S / "make-secrets.sh"), overlay, str(folder)],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
        out[overlay] = folder
    return out


def named(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [doc for doc in of_kind(docs, kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def workloads(docs: list[Doc]) -> list[Doc]:
    return of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet")


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def all_containers(workload: Doc) -> list[Doc]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def headway_deployments(docs: list[Doc]) -> list[Doc]:
    """The workloads running our image, by role (the component label): Deployments, and
    the gateways' StatefulSet."""
    found = [
        doc
        for doc in workloads(docs)
        if pod_labels(doc).get("app.kubernetes.io/component") in ROLES
    ]
    assert len(found) == len(ROLES)
    return found


def component(workload: Doc) -> str:
    return pod_labels(workload)["app.kubernetes.io/component"]


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        present = key in labels
        holds = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not holds:
            return False
    return True


def settings_config(docs: list[Doc]) -> dict[str, str]:
    """The ConfigMap every headway container reads (envFrom); its name carries a hash."""
    maps = [
        doc
        for doc in of_kind(docs, "ConfigMap")
        if doc["metadata"]["name"].startswith("headway-settings-")
    ]
    assert len(maps) == 1
    data: dict[str, str] = maps[0]["data"]
    return data


# --- schemas ------------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema that refuses unknown fields, as the API
    server's strict field validation does (it prunes them otherwise)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items() if not key.startswith("x-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd(name: str) -> Doc:
    document: Doc = yaml.safe_load((KEDA / f"keda.sh_{name}.yaml").read_text(encoding="utf-8"))
    return document


def crd_validator(document: Doc) -> jsonschema.Draft7Validator:
    (version,) = [v for v in document["spec"]["versions"] if v["served"] and v["storage"]]
    schema = dict(version["schema"]["openAPIV3Schema"])
    properties = dict(schema["properties"])
    properties.pop("metadata")  # ObjectMeta: checked as Kubernetes checks it, below
    properties.pop("status", None)  # written by KEDA, never by us
    schema["properties"] = properties
    return jsonschema.Draft7Validator(strict(schema))


def test_keda_crds_are_the_vendored_release() -> None:
    readme = (K8S / "schemas" / "README.md").read_text(encoding="utf-8")
    assert "v2.20.2" in readme
    for name in ("scaledobjects", "triggerauthentications"):
        document = crd(name)
        assert document["kind"] == "CustomResourceDefinition"
        assert document["spec"]["group"] == "keda.sh"
        assert f"keda.sh_{name}.yaml" in readme
    # The one CEL rule of ScaledObject's schema is checked by hand below: a new one in a
    # newer release must be read and added there too.
    (version,) = crd("scaledobjects")["spec"]["versions"]
    rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    assert [rule["message"] for rule in rules] == [
        "minReplicaCount must be less than or equal to maxReplicaCount"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_matches_the_kubernetes_schemas_strictly(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    problems: list[str] = []
    for doc in rendered[overlay]:
        # KEDA's kinds: their metadata as an ObjectMeta, the rest against the CRDs below.
        checked = (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
            if doc["apiVersion"].startswith("keda.sh/")
            else doc
        )
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(checked, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(part) for part in exc.path)
                problems.append(f"{named(doc)} ({version}) at {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{named(doc)}: {exc.message}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_objects_match_the_vendored_crds_strictly(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    validators = {
        "ScaledObject": crd_validator(crd("scaledobjects")),
        "TriggerAuthentication": crd_validator(crd("triggerauthentications")),
    }
    keda = [doc for doc in rendered[overlay] if doc["apiVersion"].startswith("keda.sh/")]
    assert {doc["kind"] for doc in keda} <= set(validators)
    assert of_kind(keda, "ScaledObject")
    problems = [
        f"{named(doc)} at {'/'.join(map(str, error.path))}: {error.message}"
        for doc in keda
        for error in validators[doc["kind"]].iter_errors(
            {key: value for key, value in doc.items() if key != "metadata"}
        )
    ]
    assert not problems, "\n".join(problems)
    for scaled in of_kind(keda, "ScaledObject"):  # the CRD's CEL rule
        spec = scaled["spec"]
        assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100), named(scaled)


def trigger_parameters(docs: list[Doc], trigger: Doc) -> set[str]:
    """Metadata keys, and the parameters its TriggerAuthentication supplies."""
    keys = set(trigger["metadata"])
    if "authenticationRef" in trigger:
        auth = one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        keys |= {ref["parameter"] for ref in auth["spec"]["secretTargetRef"]}
    return keys


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_triggers_name_only_parameters_their_scalers_read(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    known = json.loads((KEDA / "trigger-metadata.json").read_text(encoding="utf-8"))["triggers"]
    docs = rendered[overlay]
    for scaled in of_kind(docs, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            scaler = known[trigger["type"]]
            unknown = set(trigger["metadata"]) - set(scaler["required"]) - set(scaler["optional"])
            assert not unknown, f"{named(scaled)} {trigger['type']}: unknown {sorted(unknown)}"
            missing = set(scaler["required"]) - trigger_parameters(docs, trigger)
            assert not missing, f"{named(scaled)} {trigger['type']}: missing {sorted(missing)}"


def test_checkov_passes_every_check_or_says_why_not(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    files: list[str] = []
    for overlay, docs in rendered.items():
        path = tmp_path / f"{overlay}.yaml"
        path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        files += ["--file", str(path)]
    run = subprocess.run(
        [tool("checkov"), *files, "--framework", "kubernetes", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    report = json.loads(run.stdout)
    summary = report["summary"]
    failed = [
        f"{check['check_id']} {check['resource']}: {check['check_name']}"
        for check in report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 400  # the checks did run, on every object
    for skipped in report["results"]["skipped_checks"]:
        reason = skipped.get("check_result", {}).get("suppress_comment", "")
        assert len(reason) > 20, f"{skipped['check_id']} {skipped['resource']}: no reason"
    assert run.returncode == 0, run.stderr[-2000:]


# --- containers ------------------------------------------------------------------------


def effective(container: Doc, spec: Doc, key: str) -> Any:
    """A security setting as it applies: the container's, else the pod's."""
    own = container.get("securityContext", {})
    return own[key] if key in own else spec.get("securityContext", {}).get(key)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down_and_sized(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    for workload in workloads(rendered[overlay]):
        spec = pod_spec(workload)
        where = named(workload)
        assert spec.get("automountServiceAccountToken") is False, where
        # Service links would inject HEADWAY_GATEWAY_PORT=tcp://... into every process.
        assert spec.get("enableServiceLinks") is False, where
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), where
        for container in all_containers(workload):
            at = f"{where} {container['name']}"
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(bound, {})), f"{at}: {bound}"
            own = container["securityContext"]
            assert effective(container, spec, "runAsNonRoot") is True, at
            assert (effective(container, spec, "runAsUser") or 0) >= 10000, at
            assert own["readOnlyRootFilesystem"] is True, at
            assert own["allowPrivilegeEscalation"] is False, at
            assert own.get("privileged", False) is False, at
            assert own["capabilities"] == {"drop": ["ALL"]}, at
            assert effective(container, spec, "seccompProfile") == {"type": "RuntimeDefault"}, at
        for container in spec["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in container, f"{where} {container['name']}: no {probe}"


def probe_path(probe: Doc) -> str:
    if "httpGet" in probe:
        path: str = probe["httpGet"]["path"]
        return path
    path = probe["exec"]["command"][-1]
    return path


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_headway_probes_read_the_health_routes(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    for workload in headway_deployments(rendered[overlay]):
        (container,) = pod_spec(workload)["containers"]
        assert probe_path(container["readinessProbe"]) == "/readyz", named(workload)
        assert probe_path(container["livenessProbe"]) == "/healthz", named(workload)
        assert probe_path(container["startupProbe"]) == "/healthz", named(workload)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(rendered: dict[str, list[Doc]], overlay: str) -> None:
    """Other images by digest; ours by the project's version, its digest set at deploy
    time (a checkov skip says so on each of its workloads)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    for workload in workloads(rendered[overlay]):
        annotations = workload["metadata"].get("annotations", {})
        for container in all_containers(workload):
            image = container["image"]
            if image.split(":")[0] == "headway":
                assert image == f"headway:{version}", named(workload)
                assert any(v.startswith("CKV_K8S_43=") for v in annotations.values())
            else:
                assert re.fullmatch(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), image


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_namespace_enforces_the_restricted_pod_security_profile(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    labels = one(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, named(doc)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_workload_has_a_disruption_budget_that_lets_a_node_drain(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    budgets = of_kind(rendered[overlay], "PodDisruptionBudget")
    for workload in workloads(rendered[overlay]):
        mine = [b for b in budgets if selects(b["spec"]["selector"], pod_labels(workload))]
        assert len(mine) == 1, f"{named(workload)}: {len(mine)} PodDisruptionBudgets"
        assert mine[0]["spec"].get("maxUnavailable", 0) >= 1, named(workload)


# --- network policies -----------------------------------------------------------------

KUBE_DNS = ({"kubernetes.io/metadata.name": "kube-system"}, {"k8s-app": "kube-dns"})
PROMETHEUS = (
    {"kubernetes.io/metadata.name": "monitoring"},
    {"app.kubernetes.io/name": "prometheus"},
)
KEDA_OPERATOR = (
    {"kubernetes.io/metadata.name": "keda"},
    {"app.kubernetes.io/name": "keda-operator"},
)
INGRESS_CONTROLLER = ({"kubernetes.io/metadata.name": "ingress-nginx"}, {"app": "controller"})
OURS = {"kubernetes.io/metadata.name": NAMESPACE}
Peer = tuple[dict[str, str], dict[str, str]] | None  # (namespace labels, pod labels); None: outside


def peer_matches(rule_peer: Doc, peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        return peer is None
    if peer is None:
        return False
    namespace_labels, labels = peer
    namespaces = rule_peer.get("namespaceSelector")
    in_namespace = (
        selects(namespaces, namespace_labels)
        if namespaces is not None
        else (namespace_labels == OURS)
    )
    pods = rule_peer.get("podSelector")
    return in_namespace and (pods is None or selects(pods, labels))


def allows(
    policies: list[Doc], direction: str, pod: dict[str, str], peer: Peer, port: int, udp: bool
) -> bool:
    """Whether the policies selecting ``pod`` allow this connection in ``direction``."""
    mine = [
        p
        for p in policies
        if direction in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], pod)
    ]
    if not mine:
        return True  # not isolated in this direction
    protocol = "UDP" if udp else "TCP"
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in mine:
        for rule in policy["spec"].get(key, []):
            ports = rule.get("ports") or [{"port": port, "protocol": protocol}]
            peers = rule.get(peers_key) or [{"ipBlock": {}}, {"namespaceSelector": {}}]
            if any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports) and (
                any(peer_matches(p, peer) for p in peers)
            ):
                return True
    return False


def flow_allowed(
    policies: list[Doc], source: Peer, destination: Peer, port: int, udp: bool = False
) -> bool:
    """Allowed where each end is ours: egress at the source, ingress at the destination."""
    out = (
        source is None
        or source[0] != OURS
        or allows(policies, "Egress", source[1], destination, port, udp)
    )
    into = (
        destination is None
        or destination[0] != OURS
        or allows(policies, "Ingress", destination[1], source, port, udp)
    )
    return out and into


def ours(docs: list[Doc], component_name: str) -> Peer:
    (workload,) = [w for w in workloads(docs) if component(w) == component_name]
    return OURS, pod_labels(workload)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_allow_the_flows_there_are_and_no_others(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    policies = of_kind(docs, "NetworkPolicy")
    deny = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {}
        and not (p["spec"].get("ingress") or p["spec"].get("egress"))
    ]
    assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}

    gateway, embed, rerank = (ours(docs, c) for c in ("gateway", "embed-worker", "rerank-worker"))
    billing, executor = ours(docs, "billing"), ours(docs, "executor")
    wanted: list[tuple[Peer, Peer, int]] = [
        (INGRESS_CONTROLLER, gateway, 8080),
        (gateway, embed, 9100),
        (gateway, rerank, 9100),
        (embed, gateway, 8080),  # weights
        (rerank, gateway, 8080),
        (executor, gateway, 8080),
        *(
            (PROMETHEUS, pod, port)
            for pod, port in (
                (gateway, 9200),  # the operations port: /metrics is there only
                (embed, 9100),
                (rerank, 9100),
                (billing, 9300),
                (executor, 9400),
            )
        ),
    ]
    refused: list[tuple[Peer, Peer, int]] = [
        # The gateways' operations port: Prometheus alone, not clients nor our own pods.
        *((peer, gateway, 9200) for peer in (INGRESS_CONTROLLER, None, executor, embed, billing)),
        (INGRESS_CONTROLLER, embed, 9100),  # workers answer the gateways alone
        (executor, embed, 9100),
        (billing, gateway, 8080),
        (embed, rerank, 9100),
        (gateway, None, 443),  # nothing else leaves
    ]
    nats = ours(docs, "nats")  # in the namespace in both: its clients, its monitoring
    wanted += [(KEDA_OPERATOR, nats, 8222)]
    wanted += [(pod, nats, port) for pod in (gateway, billing, executor) for port in (4222, 8222)]
    refused += [(embed, nats, 4222), (embed, nats, 8222), (INGRESS_CONTROLLER, nats, 4222)]
    if overlay == "dev":
        postgres, redis = (ours(docs, c) for c in ("postgres", "redis"))
        cache_redis = ours(docs, "redis-cache")
        wanted += [(pod, postgres, 5432) for pod in (gateway, embed, rerank, billing, executor)]
        wanted += [(gateway, redis, 6379), (gateway, cache_redis, 6379)]
        refused += [(embed, redis, 6379), (INGRESS_CONTROLLER, postgres, 5432)]
        refused += [(embed, cache_redis, 6379), (executor, cache_redis, 6379)]
    else:
        wanted += [(pod, None, 5432) for pod in (gateway, embed, rerank, billing, executor)]
        wanted += [(gateway, None, 6379)]
        wanted += [(nats, nats, 6222)]  # the cluster's routes
        refused += [(embed, None, 6379), (gateway, nats, 6222), (nats, None, 6222)]
    for pod in workloads(docs):
        wanted.append(((OURS, pod_labels(pod)), KUBE_DNS, 53))
    problems = [
        f"refused: {s} -> {d}:{p}" for s, d, p in wanted if not flow_allowed(policies, s, d, p)
    ]
    problems += [
        f"allowed: {s} -> {d}:{p}" for s, d, p in refused if flow_allowed(policies, s, d, p)
    ]
    for pod in workloads(docs):
        if not flow_allowed(policies, (OURS, pod_labels(pod)), KUBE_DNS, 53, udp=True):
            problems.append(f"{named(pod)}: no DNS over UDP")
        # Selected by a policy of its own (beyond the namespace-wide deny and DNS), and
        # every port it listens on reachable by someone.
        own = [
            p
            for p in policies
            if p["spec"]["podSelector"] and selects(p["spec"]["podSelector"], pod_labels(pod))
        ]
        if not own:
            problems.append(f"{named(pod)}: no NetworkPolicy of its own")
        for container in pod_spec(pod)["containers"]:
            for port in container.get("ports", []):
                ingress = [p for p in own if "Ingress" in p["spec"]["policyTypes"]]
                if not any(
                    any(q["port"] == port["containerPort"] for q in rule.get("ports", []))
                    for p in ingress
                    for rule in p["spec"].get("ingress", [])
                ):
                    problems.append(f"{named(pod)}: port {port['containerPort']} unreachable")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateways_metrics_are_on_a_port_only_prometheus_may_reach(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The port the gateway serves /metrics on (gateway.ops_port, listening on every pod
    address) is the one scraped, is in no Service, and every ingress rule that names it
    admits Prometheus's pods (by namespace and pod selector) and nothing else; the client
    port stays open to everyone."""
    docs = rendered[overlay]
    (workload,) = [w for w in headway_deployments(docs) if component(w) == "gateway"]
    settings = role_settings(docs, workload, secret_files[overlay], monkeypatch, tmp_path)
    ops_port, client_port = settings.gateway.ops_port, settings.gateway.port
    assert settings.gateway.ops_host == "0.0.0.0" and ops_port != client_port
    (container,) = pod_spec(workload)["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": client_port, "ops": ops_port}
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ops_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    for service in of_kind(docs, "Service"):
        if selects({"matchLabels": service["spec"].get("selector", {})}, pod_labels(workload)):
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in ("http", client_port), named(service)

    policies = of_kind(docs, "NetworkPolicy")
    naming_ops = [
        rule
        for policy in policies
        if "Ingress" in policy["spec"]["policyTypes"]
        and selects(policy["spec"]["podSelector"], pod_labels(workload))
        for rule in policy["spec"].get("ingress", [])
        if not rule.get("ports") or any(p["port"] == ops_port for p in rule["ports"])
    ]
    assert naming_ops, "no rule opens the operations port"
    for rule in naming_ops:
        peers = rule.get("from")
        assert peers, f"an ingress rule opens {ops_port} to every source"
        for peer in peers:
            assert set(peer) == {"namespaceSelector", "podSelector"}, peer
            assert peer_matches(peer, PROMETHEUS), peer
            assert not peer_matches(peer, INGRESS_CONTROLLER), peer
    gateway = ours(docs, "gateway")
    assert flow_allowed(policies, PROMETHEUS, gateway, ops_port)
    for client in (None, INGRESS_CONTROLLER):
        assert flow_allowed(policies, client, gateway, client_port)
        assert not flow_allowed(policies, client, gateway, ops_port)


# --- settings -------------------------------------------------------------------------


def setting_field(key: str) -> bool:
    """Whether HEADWAY_A__B__C names a field of Settings (load_settings ignores unknown
    top-level variables, so an undeclared one would pass silently)."""
    if not key.startswith("HEADWAY_"):
        return False
    model: Any = Settings
    for part in key.removeprefix("HEADWAY_").lower().split("__"):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        model = fields[part].annotation
    return True


def mounted_file(workload: Doc, container: Doc, path: str) -> tuple[Doc, str] | None:
    """The volume and the key a file at ``path`` comes from (a Secret's or ConfigMap's
    item mounted as a directory), or None."""
    folder, name = path.rsplit("/", 1)
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"] != folder or "subPath" in mount:
            continue
        volume = volumes[mount["name"]]
        source = volume.get("secret") or volume.get("configMap")
        if source is None:
            continue
        for item in source.get("items", []):
            if item["path"] == name:
                return volume, item["key"]
    return None


def mount_of(workload: Doc, container: Doc, path: str) -> Doc | None:
    """The volume mounted exactly at ``path`` in ``container`` (a StatefulSet's claim
    template as ``{"volumeClaimTemplate": ...}``)."""
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    for template in workload["spec"].get("volumeClaimTemplates", []):
        volumes[template["metadata"]["name"]] = {"volumeClaimTemplate": template}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"] == path:
            return {**volumes[mount["name"]], "readOnly": mount.get("readOnly", False)}
    return None


def config_flag(container: Doc) -> str:
    args: list[str] = container["args"]
    return args[args.index("--config") + 1]


def role_settings(
    docs: list[Doc],
    workload: Doc,
    secrets: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    container_name: str | None = None,
) -> Settings:
    """The settings a container of ``workload`` starts with: the ConfigMap and its own
    env, the TOML file of its Secret, and its --pool. Files under /etc/headway are
    looked up here under ``tmp_path`` (made empty) once it is checked they are mounted."""
    container = next(c for c in all_containers(workload) if container_name in (None, c["name"]))
    env = dict(settings_config(docs))
    for variable in container.get("env", []):
        env[variable["name"]] = variable.get("value", "pod-name")
    for key in list(os.environ):
        if key.startswith("HEADWAY_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        assert setting_field(key), f"{key} is not a headway setting"
        if value.startswith("/etc/headway/"):
            assert mounted_file(workload, container, value), f"{named(workload)}: {value}"
            local = tmp_path / value.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.touch()
            value = str(local)
        monkeypatch.setenv(key, value)
    config = config_flag(container)
    source = mounted_file(workload, container, config)
    assert source is not None, f"{named(workload)}: {config} is not mounted"
    volume, key = source
    role = ROLES[component(workload)]
    assert volume["secret"]["secretName"] == f"headway-secrets-{role}"
    assert key == f"{role}.toml", f"{named(workload)} mounts {key}"
    args: list[str] = container["args"]
    flags = {"worker": {"pool": args[args.index("--pool") + 1]}} if "--pool" in args else None
    return load_settings(config_file=secrets / key, flags=flags)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_is_real_and_every_file_it_names_is_mounted(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered[overlay]
    for workload in headway_deployments(docs):
        role = ROLES[component(workload)]
        for container in all_containers(workload):
            settings = role_settings(
                docs, workload, secret_files[overlay], monkeypatch, tmp_path, container["name"]
            )
            where = f"{named(workload)} {container['name']}"
            data = mount_of(workload, container, str(settings.data_dir))
            assert data is not None and "emptyDir" in data and not data["readOnly"], where
            outbox = mount_of(workload, container, str(settings.outbox_dir))
            if role == "gateway":  # on the pod's own claim (test_the_gateways_outbox_...)
                assert outbox is not None and "volumeClaimTemplate" in outbox, where
                assert not outbox["readOnly"], where
            else:
                assert outbox is None, where
            assert mount_of(workload, container, "/tmp") is not None, where
            assert settings.postgres_url is not None, where
            if overlay == "prod":
                assert settings.tls.internal, where
                for name in ("ca", "cert", "key"):
                    local = getattr(settings.tls, name)
                    path = "/" + str(local.relative_to(tmp_path))
                    found = mounted_file(workload, container, path)
                    assert found is not None, f"{where}: {path}"
                    volume, key = found
                    assert volume["secret"]["secretName"] == "headway-tls"
                    expected = {"ca": "ca.crt", "cert": f"{CERTIFICATE_OF[role]}.crt"}.get(
                        name, f"{CERTIFICATE_OF[role]}.key"
                    )
                    assert key == expected, f"{where}: {path} is {key}"
            if role == "gateway":
                for store in (settings.model_root, settings.files_dir):
                    volume = mount_of(workload, container, str(store))
                    assert volume is not None and "persistentVolumeClaim" in volume, where
                assert settings.tls.public == (overlay == "prod"), where
                assert settings.weights.token, where
            if role == "executor":
                volume = mount_of(workload, container, str(settings.files_dir))
                assert volume is not None and volume["persistentVolumeClaim"]["claimName"] == (
                    "headway-files"
                )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_roles_share_their_tokens(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered[overlay]
    loaded = {
        component(w): role_settings(docs, w, secret_files[overlay], monkeypatch, tmp_path)
        for w in headway_deployments(docs)
    }
    gateway = loaded["gateway"]
    assert loaded["embed-worker"].weights.token == gateway.weights.token != ""
    assert loaded["executor"].batches.executor_token == gateway.batches.executor_token != ""
    assert gateway.observability.console.session_secret
    # One database; in dev each role its own Postgres role (make-secrets.sh), in prod each
    # role's own where POSTGRES_URL_<ROLE> is given (here billing's alone).
    urls = {name: urlsplit(s.postgres_url or "") for name, s in loaded.items()}
    assert len({(u.hostname, u.port, u.path) for u in urls.values()}) == 1
    users = {name: u.username for name, u in urls.items()}
    if overlay == "dev":
        assert users == {name: f"headway_{ROLES[name]}" for name in loaded}


def service_port(docs: list[Doc], url_or_target: str) -> tuple[Doc, int]:
    """The Service a cluster DNS name (NAME.NAMESPACE.svc.cluster.local) names, and the
    port its pods listen on for the Service port given."""
    host, port = parse_target(url_or_target.split("://")[-1].rstrip("/"))
    name, namespace, *domain = host.split(".")
    assert domain == ["svc", "cluster", "local"] and namespace == NAMESPACE, host
    service = one(docs, "Service", name)
    ports = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert len(ports) == 1, f"{name} has no port {port}"
    (spec_port,) = ports
    pods = [
        w
        for w in workloads(docs)
        if selects({"matchLabels": service["spec"]["selector"]}, pod_labels(w))
    ]
    assert len(pods) == 1, f"{name} selects {len(pods)} workloads"
    (container,) = pod_spec(pods[0])["containers"]
    (listening,) = [p for p in container["ports"] if p["name"] == spec_port["targetPort"]]
    return pods[0], listening["containerPort"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_names_headway_dials_are_its_services(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """--embed-dns / HEADWAY_GATEWAY__EMBED_DNS is the embed workers' headless Service,
    on the port they listen on; the weights URL and the executors' gateway URLs are the
    gateways' Service."""
    docs = rendered[overlay]
    by_role = {component(w): w for w in headway_deployments(docs)}
    secrets = secret_files[overlay]
    gateway = role_settings(docs, by_role["gateway"], secrets, monkeypatch, tmp_path)
    for pool in ("embed", "rerank"):
        target = getattr(gateway.gateway, f"{pool}_dns")
        assert target is not None
        pods, port = service_port(docs, target)
        assert pods is by_role[f"{pool}-worker"]
        assert one(docs, "Service", f"headway-{pool}")["spec"]["clusterIP"] == "None"
        worker = role_settings(docs, pods, secrets, monkeypatch, tmp_path, "worker")
        assert worker.worker.pool == pool
        assert worker.worker.port == port
        assert worker.weights.url is not None
        assert service_port(docs, worker.weights.url) == (by_role["gateway"], gateway.gateway.port)
        scheme = "https" if overlay == "prod" else "http"
        assert worker.weights.url.startswith(f"{scheme}://")
    executor = role_settings(docs, by_role["executor"], secrets, monkeypatch, tmp_path)
    for url in executor.batches.executor.gateway_urls:
        assert service_port(docs, url) == (by_role["gateway"], gateway.gateway.port)


def graceful_shutdown_s() -> float:
    """uvicorn's graceful shutdown as src/headway/serve.py configures it."""
    tree = ast.parse((ROOT / "src" / "headway" / "serve.py").read_text(encoding="utf-8"))
    values = [
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword)
        and node.arg == "timeout_graceful_shutdown"
        and isinstance(node.value, ast.Constant)
    ]
    assert len(values) == 1
    seconds: float = values[0]
    return seconds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_the_drain(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered[overlay]
    shutdown = graceful_shutdown_s()
    for workload in headway_deployments(docs):
        role = ROLES[component(workload)]
        settings = role_settings(docs, workload, secret_files[overlay], monkeypatch, tmp_path)
        (container,) = pod_spec(workload)["containers"]
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
        sleep_s = pre_stop.get("seconds", 0)
        drain_s = {
            "gateway": settings.gateway.drain_delay_s,
            "worker": settings.worker.drain_delay_s,
        }
        # The gateway's last relay of its outbox comes after its requests have finished.
        flush_s = settings.gateway.outbox_flush_s if role == "gateway" else 0.0
        needed = sleep_s + drain_s.get(role, 0.0) + shutdown + flush_s
        grace = pod_spec(workload)["terminationGracePeriodSeconds"]
        assert grace >= needed, f"{named(workload)}: {grace} s < {needed} s"
        if role in ("gateway", "worker"):
            assert sleep_s > 0 and drain_s[role] > 0, named(workload)
        if role == "gateway":
            assert 0 < flush_s < grace and grace > needed, named(workload)
        if role == "worker":
            # Gone from the headless Service at deletion: every gateway re-resolves and
            # stops sending before the worker turns unready.
            assert sleep_s >= settings.gateway.dns_interval_s, named(workload)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateways_outbox_is_on_a_volume_of_its_own_named_by_a_stable_id(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Billing across deploys: a StatefulSet whose pods each mount their own claim where
    the outbox lives, kept when the pod goes, and whose gateway id (the outbox's file name)
    is the pod's name, which the next pod of that ordinal has too; a headless governing
    Service; one pod at a time in a rolling update, so one outbox never has two writers."""
    docs = rendered[overlay]
    assert not [d for d in of_kind(docs, "Deployment") if component(d) == "gateway"]
    gateway = one(docs, "StatefulSet", "headway-gateway")
    spec = gateway["spec"]
    (container,) = pod_spec(gateway)["containers"]
    settings = role_settings(docs, gateway, secret_files[overlay], monkeypatch, tmp_path)

    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    outbox_mount = mounts[str(settings.outbox_dir)]
    assert outbox_mount["name"] == claim["metadata"]["name"]
    assert "subPath" not in outbox_mount and not outbox_mount.get("readOnly", False)
    assert claim["metadata"]["name"] not in {v["name"] for v in pod_spec(gateway)["volumes"]}
    retention = spec["persistentVolumeClaimRetentionPolicy"]
    assert retention == {"whenDeleted": "Retain", "whenScaled": "Retain"}

    ids = [e for e in container.get("env", []) if e["name"] == "HEADWAY_GATEWAY__ID"]
    assert ids == [
        {"name": "HEADWAY_GATEWAY__ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]
    assert "HEADWAY_GATEWAY__ID" not in settings_config(docs)

    governing = one(docs, "Service", spec["serviceName"])
    assert governing["spec"]["clusterIP"] == "None"
    assert selects({"matchLabels": governing["spec"]["selector"]}, pod_labels(gateway))
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert "maxUnavailable" not in spec["updateStrategy"].get("rollingUpdate", {})
    for constraint in pod_spec(gateway).get("topologySpreadConstraints", []):
        # pod-template-hash is a Deployment's label; a StatefulSet's pods carry this one.
        assert constraint.get("matchLabelKeys", []) == ["controller-revision-hash"]


def test_the_gateway_id_derives_the_outbox_path_stably() -> None:
    """The id the StatefulSet gives (the pod name) is the outbox's file name, the same on
    every start; without one, HOSTNAME-PORT (a pod's hostname is its name too)."""
    from headway.metering.build import gateway_id

    settings = Settings.model_validate({"gateway": {"id": "headway-gateway-1"}})
    assert gateway_id(settings) == gateway_id(settings) == "headway-gateway-1"
    for bad in ("../escape", "a/b", " gateway", "x" * 300):
        with pytest.raises(ValueError, match="id"):
            Settings.model_validate({"gateway": {"id": bad}})


# --- scaling --------------------------------------------------------------------------


def declared_metrics() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "headway").rglob("*.py"):
        names |= set(re.findall(r"""["'](headway_[a-z0-9_]+)["']""", path.read_text("utf-8")))
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scaled_objects_read_metrics_the_code_exports(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    overlay: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered[overlay]
    metrics = declared_metrics()
    queries: list[str] = []
    by_role = {component(w): w for w in headway_deployments(docs)}
    gateway = role_settings(docs, by_role["gateway"], secret_files[overlay], monkeypatch, tmp_path)
    billing = role_settings(docs, by_role["billing"], secret_files[overlay], monkeypatch, tmp_path)
    for scaled in of_kind(docs, "ScaledObject"):
        spec = scaled["spec"]
        target = one(docs, spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"])
        assert "replicas" not in target["spec"], f"{named(target)}: the HPA owns its replicas"
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        up, down = (behavior[d]["stabilizationWindowSeconds"] for d in ("scaleUp", "scaleDown"))
        assert 0 < up < down and down >= 300, named(scaled)
        triggers = {trigger["name"]: trigger for trigger in spec["triggers"]}
        role = component(target)
        if role.endswith("-worker"):
            pool = role.removesuffix("-worker")
            assert set(triggers) == {"queue", "shed", "waiting"}
            meta = {name: trigger["metadata"] for name, trigger in triggers.items()}
            assert f'headway_worker_queue_texts{{pool="{pool}"}}' in meta["queue"]["query"]
            assert f'rate(headway_shed_total{{pool="{pool}"}}[1m])' in meta["shed"]["query"]
            assert f'headway_pool_waiting_requests{{pool="{pool}"}}' in meta["waiting"]["query"]
            assert meta["waiting"]["activationThreshold"] == "0"
            for trigger in meta.values():
                queries.append(trigger["query"])
                used = set(re.findall(r"\b(headway_[a-z0-9_]+)", trigger["query"]))
                assert used <= metrics, f"not exported: {sorted(used - metrics)}"
            if spec.get("minReplicaCount", 0) == 0:
                assert gateway.gateway.cold_start_hold, f"{named(scaled)} at zero, no hold"
        else:
            assert role == "billing"
            (lag,) = triggers.values()
            assert lag["type"] == "nats-jetstream"
            assert lag["metadata"]["stream"] == billing.billing.stream
            assert lag["metadata"]["consumer"] == billing.billing.consumer
            endpoint = lag["metadata"].get("natsServerMonitoringEndpoint")
            assert endpoint is not None and billing.nats_url is not None
            nats = one(docs, "Service", "headway-nats")
            assert endpoint.split(".")[0] == nats["metadata"]["name"]
            for url in billing.nats_url.split(","):  # prod: each server of the cluster
                assert url.split(":")[1].lstrip("/").split(".")[0].startswith("headway-nats")
            monitoring = int(endpoint.rsplit(":", 1)[1])
            assert monitoring in {p["port"] for p in nats["spec"]["ports"]}
    run = check_queries(queries, tmp_path / "keda-queries.yml", "keda")
    assert run.returncode == 0, run.stdout + run.stderr


# --- commands -------------------------------------------------------------------------


def cli_command(words: list[str]) -> tuple[Any, list[str]]:
    """The headway CLI command the words name, and the words after it."""
    command: Any = typer.main.get_command(headway_cli)
    rest = list(words)
    while isinstance(command, typer.core.TyperGroup) and rest and not rest[0].startswith("-"):
        sub = command.get_command(None, rest[0])
        assert sub is not None, (
            f"headway has no command {' '.join(words[: len(words) - len(rest) + 1])}"
        )
        assert not sub.hidden, (
            f"headway {' '.join(words[: len(words) - len(rest) + 1])} is an old name, hidden:"
            " use its new one (headway --help)"
        )
        command, rest = sub, rest[1:]
    return command, rest


def check_command(words: list[str]) -> None:
    """``words`` (after ``headway``) is a command of the CLI with options it takes."""
    command, rest = cli_command(words)
    assert not isinstance(command, typer.core.TyperGroup), (
        f"headway {' '.join(words)}: a group, not a command"
    )
    options = {opt for param in command.params for opt in param.opts}
    for word in rest:
        if word.startswith("--"):
            assert word.split("=")[0] in options, f"headway {' '.join(words)}: no {word}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_a_headway_command_that_exists(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    for workload in headway_deployments(rendered[overlay]):
        for container in all_containers(workload):
            check_command(container["args"])


def test_workers_fetch_the_version_the_default_import_builds(
    rendered: dict[str, list[Doc]],
) -> None:
    """Both pools' init containers fetch one version, the same in every overlay."""
    versions = {
        init["args"][2]
        for docs in rendered.values()
        for w in headway_deployments(docs)
        for init in pod_spec(w).get("initContainers", [])
    }
    assert len(versions) == 1
    assert re.fullmatch(r"[0-9a-f]{64}", next(iter(versions)))


@pytest.mark.e2e
def test_the_fetched_version_is_what_models_import_builds(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    """The default model's artifact is built deterministically from the packaged weights,
    so the version the manifests pin is the one `headway models import` stores."""
    from headway.models.importer import import_default
    from headway.models.store import ModelStore

    (init,) = pod_spec(one(rendered["dev"], "Deployment", "headway-embed"))["initContainers"]
    assert import_default(ModelStore(tmp_path / "models")).version == init["args"][2]


@pytest.fixture
def worker_over_mtls(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A server with a worker's TLS (a client certificate of the CA required), answering
    /healthz 200 and /readyz 503; the files at a pod's mount paths under tmp_path."""
    from headway.tls.contexts import server_context
    from headway.tls.folder import init

    certs = tmp_path / "certs"
    init(certs, days=1, ca_days=2)
    mounted = tmp_path / "etc" / "headway" / "tls"
    mounted.mkdir(parents=True)
    for source, path in (
        ("ca.crt", "ca.crt"),
        ("worker.crt", "internal.crt"),
        ("worker.key", "internal.key"),
    ):
        (mounted / path).write_bytes((certs / source).read_bytes())

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Health)
    context: ssl.SSLContext = server_context(
        certs / "worker.crt", certs / "worker.key", client_ca=certs / "ca.crt"
    )
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_prod_worker_probes_pass_mutual_tls_and_tell_unready(
    rendered: dict[str, list[Doc]], worker_over_mtls: tuple[Path, int]
) -> None:
    """The exec probes the prod overlay gives workers (the kubelet's httpGet has no client
    certificate to offer), run against a server that refuses callers without one."""
    root, port = worker_over_mtls
    (container,) = pod_spec(one(rendered["prod"], "Deployment", "headway-embed"))["containers"]
    results = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        python, flag, script, path = container[probe]["exec"]["command"]
        assert (python, flag) == ("python", "-c")
        script = script.replace("/etc/headway/tls", f"{root}/etc/headway/tls")
        script = script.replace("127.0.0.1:9100", f"127.0.0.1:{port}")
        run = subprocess.run([sys.executable, "-c", script, path], capture_output=True, timeout=30)
        results[probe] = run.returncode
    assert results == {"startupProbe": 0, "readinessProbe": 1, "livenessProbe": 0}


def nats_config(docs: list[Doc]) -> str:
    (config,) = [
        doc["data"]["nats.conf"]
        for doc in of_kind(docs, "ConfigMap")
        if doc["metadata"]["name"].startswith("headway-nats-")
    ]
    return str(config)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_nats_config_is_valid_and_fsyncs_before_it_acks(
    rendered: dict[str, list[Doc]], tmp_path: Path, overlay: str
) -> None:
    """nats-server (the test extra's) accepts each overlay's config; its ports are the
    ones its Service and KEDA's trigger name."""
    docs = rendered[overlay]
    config = nats_config(docs)
    assert re.search(r"^\s*sync_interval: always$", config, re.MULTILINE)
    ports = {p["name"]: p["port"] for p in one(docs, "Service", "headway-nats")["spec"]["ports"]}
    assert re.search(rf"^port: {ports['client']}$", config, re.MULTILINE)
    assert re.search(rf"^http_port: {ports['monitoring']}$", config, re.MULTILINE)
    path = tmp_path / "nats.conf"
    config = config.replace("store_dir: /data", f"store_dir: {tmp_path}")
    path.write_text(config.replace("/var/run/nats/", f"{tmp_path}/"), "utf-8")
    server = Path(sys.executable).parent / "nats-server"
    run = subprocess.run(
        [str(server), "-c", str(path), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "POD_NAME": "headway-nats-0"},
    )
    assert run.returncode == 0, run.stdout + run.stderr


def file_store_bytes(config: str) -> int:
    store = re.search(r"^\s*max_file_store: (\d+)GB$", config, re.MULTILINE)
    assert store is not None, "the NATS config sets no max_file_store in GB"
    return int(store.group(1)) * 10**9


def test_prod_nats_is_a_three_server_cluster_and_the_streams_have_three_replicas(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered["prod"]
    nats = one(docs, "StatefulSet", "headway-nats")
    spec = nats["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    (term,) = pod_spec(nats)["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["labelSelector"], pod_labels(nats))  # one server per node
    (container,) = pod_spec(nats)["containers"]
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    assert pod_name in container["env"]
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] in {m["name"] for m in container["volumeMounts"]}
    service = one(docs, "Service", spec["serviceName"])
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}

    config = nats_config(docs)
    assert re.search(r"^server_name: \$POD_NAME$", config, re.MULTILINE)
    cluster = re.search(r"^cluster \{(.*?)^\}", config, re.MULTILINE | re.DOTALL)
    assert cluster is not None and f"port: {ports['cluster']}" in cluster.group(1)
    pods = [f"headway-nats-{i}.headway-nats.{NAMESPACE}.svc.cluster.local" for i in range(3)]
    routes = re.findall(r"nats://([^:\s]+):(\d+)", cluster.group(1))
    assert routes == [(pod, str(ports["cluster"])) for pod in pods]
    claimed = claim["spec"]["resources"]["requests"]["storage"]
    assert claimed.endswith("Gi") and file_store_bytes(config) < int(claimed[:-2]) << 30

    by_role = {component(w): w for w in headway_deployments(docs)}
    for role in ("gateway", "billing", "executor"):
        settings = role_settings(docs, by_role[role], secret_files["prod"], monkeypatch, tmp_path)
        assert settings.nats_url is not None
        assert settings.nats_url.split(",") == [f"nats://{pod}:{ports['client']}" for pod in pods]
        streams = settings.streams
        assert streams.monitor_url_list == tuple(
            f"http://{pod}:{ports['monitoring']}" for pod in pods
        )
        assert streams.usage.replicas == streams.batch_work.replicas == 3
        assert not streams.allow_volatile and streams.usage.storage == "file"
        assert streams.usage.discard == streams.batch_work.discard == "new"
        reserved = streams.usage.max_bytes + streams.batch_work.max_bytes
        assert reserved < file_store_bytes(config)  # every max_bytes is reserved in it


def test_dev_nats_is_one_server_and_the_streams_fit_its_store(
    rendered: dict[str, list[Doc]],
    secret_files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    docs = rendered["dev"]
    assert one(docs, "StatefulSet", "headway-nats")["spec"]["replicas"] == 1
    by_role = {component(w): w for w in headway_deployments(docs)}
    for role in ("gateway", "billing", "executor"):
        settings = role_settings(docs, by_role[role], secret_files["dev"], monkeypatch, tmp_path)
        streams = settings.streams
        assert streams.usage.replicas == streams.batch_work.replicas == 1
        reserved = streams.usage.max_bytes + streams.batch_work.max_bytes
        assert reserved < file_store_bytes(nats_config(docs))
        assert not streams.allow_volatile
