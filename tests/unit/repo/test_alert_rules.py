"""The Prometheus rules, the example config and the Grafana dashboard in deploy/.

promtool checks the rules and runs their unit tests (deploy/prometheus/rules_test.yml:
each alert fires on a series that should fire it, and stays silent on one that should
not); the rest is structure: every alert tells on-call what to look at, every metric a
rule or a panel reads is one the code exports, every panel says what it tells.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from headway.control.console.pages import PAGES
from headway.settings import load_settings
from headway.up.supervisor import Child, scrape_targets, write_scrape_targets

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "headway.json"
DOCS = ROOT / "docs" / "observability.md"

METRIC = re.compile(r"\b(headway_[a-z0-9_]+)")
RECORDED = re.compile(r"\b(headway:[a-z0-9_:]+)")
DECLARED = re.compile(r"""["'](headway_[a-z0-9_]+)["']""")
SUFFIXES = ("_bucket", "_sum", "_count", "_total")
PANEL_NAME = re.compile(r'"([^"]+)"')


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail(
            "promtool is not installed (Debian package prometheus): run `make prerequisites`"
        )
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=300, cwd=PROMETHEUS
    )


def check_queries(queries: list[str], path: Path, prefix: str) -> subprocess.CompletedProcess[str]:
    """promtool's parse of PromQL ``queries`` (it has no offline query check): written to
    ``path`` as recording rules ``<prefix>:query_<n>`` and checked as a rules file."""
    rules = [{"record": f"{prefix}:query_{i}", "expr": query} for i, query in enumerate(queries)]
    path.write_text(yaml.safe_dump({"groups": [{"name": prefix, "rules": rules}]}), "utf-8")
    return promtool("check", "rules", str(path))


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "rules.yml").read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def dashboard() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(DASHBOARD.read_text(encoding="utf-8")))


def panel_exprs() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def exported_names() -> set[str]:
    """Every ``headway_*`` string literal in the package: the metric names it declares."""
    names: set[str] = set()
    for path in (ROOT / "src" / "headway").rglob("*.py"):
        names |= set(DECLARED.findall(path.read_text(encoding="utf-8")))
    return names


def is_exported(name: str, declared: set[str]) -> bool:
    """``name`` as declared, or a series its declaration exports: ``_total`` of a counter
    declared without it, ``_bucket``, ``_sum``, ``_count`` of a histogram."""
    bases = {name[: -len(suffix)] for suffix in SUFFIXES if name.endswith(suffix)}
    return name in declared or any(b in declared and not b.endswith("_total") for b in bases)


def test_promtool_finds_the_rules_valid() -> None:
    checked = promtool("check", "rules", "rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    tested = promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tested_alerts = set(
        re.findall(r"alertname: (\w+)", (PROMETHEUS / "rules_test.yml").read_text("utf-8"))
    )
    untested = {rule["alert"] for rule in alerts()} - tested_alerts
    assert not untested, f"alerts without a promtool test: {sorted(untested)}"


def test_promtool_accepts_the_example_config_without_its_targets_file() -> None:
    # `headway up` has not written the targets file here: a warning, not an error.
    checked = promtool("check", "config", "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_targets_file_headway_up_writes_is_what_the_example_config_reads(
    tmp_path: Path,
) -> None:
    settings = load_settings(flags={"data_dir": str(tmp_path / "data")})
    children = [
        Child(name, cast(Any, None), f"http://127.0.0.1:{port}", args, ("127.0.0.1", port), 0.0)
        for name, args, port in (
            ("embed-worker-0", ["run", "worker", "--pool", "embed"], 9101),
            ("rerank-worker-0", ["run", "worker", "--pool", "rerank"], 9102),
            ("billing", ["run", "billing"], 9300),
            ("gateway", ["run", "gateway", "--id", "gateway"], 8080),
            ("batches", ["run", "batches", "--gateway-urls", "http://127.0.0.1:8080"], 9103),
        )
    ]
    children[3].ops_address = ("127.0.0.1", 9200)  # the gateway's operations listener
    targets = scrape_targets(children)
    assert targets[0] == {
        "targets": ["127.0.0.1:9101"],
        "labels": {"job": "worker", "instance": "embed-worker-0", "pool": "embed"},
    }
    # A gateway is scraped on its operations listener, never on its client port.
    assert targets[3] == {
        "targets": ["127.0.0.1:9200"],
        "labels": {"job": "gateway", "instance": "gateway"},
    }
    assert children[3].metrics_url == "http://127.0.0.1:9200"
    path = write_scrape_targets(settings, children)
    assert path == tmp_path / "data" / "run" / "prometheus-targets.json"
    jobs = {entry["labels"]["job"] for entry in json.loads(path.read_text(encoding="utf-8"))}
    assert jobs == {"worker", "billing", "gateway", "executor"}
    assert list(path.parent.iterdir()) == [path]  # written whole, by rename

    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8"))
    (scrape,) = config["scrape_configs"]
    assert scrape["file_sd_configs"][0]["files"] == ["../../.headway/run/prometheus-targets.json"]
    assert config["rule_files"] == ["rules.yml"]
    scrape["file_sd_configs"][0]["files"] = [str(path)]
    config["rule_files"] = [str(PROMETHEUS / "rules.yml")]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config), encoding="utf-8")
    checked = promtool("check", "config", str(copy))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNING" not in checked.stdout + checked.stderr  # the file is there and parses


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    problems = []
    for alert in alerts():
        name = alert["alert"]
        if alert.get("labels", {}).get("severity") not in ("page", "ticket"):
            problems.append(f"{name}: severity must be page or ticket")
        annotations = alert.get("annotations", {})
        for key in ("summary", "description"):
            if not str(annotations.get(key, "")).strip():
                problems.append(f"{name}: no {key}")
        if "/console/" not in annotations.get("description", "") and '"' not in annotations.get(
            "description", ""
        ):
            problems.append(f"{name}: the description names no console page or panel")
    assert not problems, problems
    assert len(alerts()) >= 10


def test_the_console_pages_and_panels_alerts_name_exist() -> None:
    named_pages = {
        page
        for alert in alerts()
        for page in re.findall(r"/console/(\w+)", alert["annotations"]["description"])
    }
    assert named_pages and named_pages <= set(PAGES), named_pages - set(PAGES)
    titles = {panel["title"] for panel in dashboard()["panels"]}
    named = {
        (alert["alert"], title)
        for alert in alerts()
        for title in PANEL_NAME.findall(alert["annotations"]["description"])
    }
    missing = [f"{alert}: {title!r}" for alert, title in sorted(named) if title not in titles]
    assert not missing, missing


def test_every_metric_the_rules_and_the_dashboard_read_is_exported_by_the_code() -> None:
    declared = exported_names()
    assert "headway_requests_total" in declared  # the scan finds declarations at all
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    used: dict[str, set[str]] = {}
    for where, expr in [(rule.get("alert") or rule["record"], rule["expr"]) for rule in rules()] + [
        ("dashboard", expr) for expr in panel_exprs()
    ]:
        for name in METRIC.findall(expr):
            used.setdefault(name, set()).add(where)
        for name in RECORDED.findall(expr):
            assert name in recorded, f"{where}: {name} is no recording rule"
    unknown = {
        name: sorted(where) for name, where in used.items() if not is_exported(name, declared)
    }
    assert not unknown, f"metrics no code in src/headway exports: {unknown}"


def test_the_dashboard_tells_each_panel_and_reads_the_datasource_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 38
    panels = board["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    problems = []
    for panel in panels:
        title = panel.get("title", "")
        if not title or len(panel.get("description", "")) < 40:
            problems.append(f"{panel['id']} {title!r}: no description")
        targets = panel.get("targets", [])
        if not targets or not all(str(target.get("expr", "")).strip() for target in targets):
            problems.append(f"{title!r}: needs targets, each with an expr")
        for holder in (panel, *targets):
            if holder.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{title!r}: datasource must be the ${{datasource}} variable")
    assert not problems, problems
    titles = [panel["title"] for panel in panels]
    assert len(titles) == len(set(titles)), "panel titles must be unique (alerts name them)"

    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("tenant", "pool"):
        assert variables[name]["type"] == "query"
        assert variables[name]["definition"].startswith("label_values(")
        assert f", {name})" in variables[name]["definition"]
    exprs = " ".join(panel_exprs())
    assert '"$tenant"' in exprs and '"$pool"' in exprs


def test_the_provisioning_files_load_the_dashboard_from_prometheus() -> None:
    source = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "headway.yml").read_text(encoding="utf-8")
    )
    (datasource,) = source["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["uid"] == "prometheus"  # the dashboard variable's default
    assert datasource["url"] == "http://localhost:9090"
    assert dashboard()["templating"]["list"][0]["current"]["value"] == datasource["uid"]

    provider_file = GRAFANA / "provisioning" / "dashboards" / "headway.yml"
    (provider,) = yaml.safe_load(provider_file.read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file"
    # The documented command mounts the dashboards folder where the provider looks.
    docs = DOCS.read_text(encoding="utf-8")
    mount = re.search(r'-v "\$PWD/deploy/grafana/dashboards:([^"]+)"', docs)
    assert mount, "docs/observability.md shows how to mount deploy/grafana/dashboards"
    assert mount.group(1) == provider["options"]["path"]
    assert '-v "$PWD/deploy/grafana/provisioning:/etc/grafana/provisioning"' in docs
    assert DASHBOARD.parent == ROOT / "deploy" / "grafana" / "dashboards"
