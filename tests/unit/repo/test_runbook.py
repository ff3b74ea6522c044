"""docs/runbook.md against deploy/prometheus/rules.yml and the code it tells on-call to use.

Every alert links its section (``runbook_url``), every section is an alert's and has the
parts on-call needs, and what a section says to run is real: each PromQL query parses
(promtool, as a recording rule of a throw-away rule file) and reads only series and labels
the code exports or a recording rule records; each ``headway`` command and flag, each
setting, console page, dashboard panel, logger, log field and gateway path exists.
"""

from __future__ import annotations

import ast
import logging
import re
import shlex
import sys
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import typer
import yaml
from pydantic import BaseModel

from headway.cli import app
from headway.control.console.pages import PAGES
from headway.logs import ACCESS_FIELDS, ACCESS_LOGGER, JsonFormatter
from headway.settings import Settings
from tests.unit.repo.test_alert_rules import ROOT, alerts, check_queries, dashboard, rules

RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "docs/runbook.md#{anchor}"
PARTS = (
    "**What it means.**",
    "**Expression.**",
    "**Impact on tenants.**",
    "**First checks.**",
    "**Likely causes, most likely first.**",
    "**Mitigations.**",
    "**Escalate.**",
    "**Resolved when.**",
)
SEVERITY_LINE = re.compile(r"^\*\*Severity\*\* `(\w+)` · \*\*for\*\* `([^`]+)` · group `([\w-]+)`$")

METRIC_NAME = re.compile(r"headway_[a-z0-9_]+")
SERIES = re.compile(r"\b(headway_[a-z0-9_]+|headway:[a-z0-9_:]+)")
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SUFFIXES = ("_bucket", "_sum", "_count", "_total")
TARGET_LABELS = frozenset({"job", "instance"})
BUILTIN_SERIES = {
    "up": frozenset({"job", "instance", "pool"}),
    "scrape_duration_seconds": frozenset({"job", "instance", "pool"}),
}
"""Series Prometheus makes itself for every target (workers' targets carry ``pool``)."""

ENV_SETTING = re.compile(r"\bHEADWAY_([A-Z0-9_]+)")
DOTTED_SETTING = re.compile(r"`((?:gateway|worker|billing|up|batches|observability)\.[a-z0-9_.]+)`")
CONSOLE_PAGE = re.compile(r"/console/(\w+)")
PANEL = re.compile(r'panels?\s+((?:"[^"]+"(?:,\s*|\s+and\s+)?)+)')
LOGGER = re.compile(r'\.logger == "([^"]+)"')
JQ_FIELD = re.compile(r"\.([a-z_]+)\b")
JQ_OBJECT = re.compile(r"\{([a-z_, ]+)\}")
GATEWAY_PATH = re.compile(r"\$GW(/[^\s\"'?]*)")


def runbook() -> str:
    return RUNBOOK.read_text(encoding="utf-8")


def sections() -> dict[str, str]:
    """Each level-2 heading of the runbook and the text under it, in order."""
    parts = re.split(r"^## (.+)$", runbook(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def alert_sections() -> dict[str, str]:
    return {title: body for title, body in sections().items() if title.startswith("Headway")}


def anchor(heading: str) -> str:
    """The anchor GitHub (and most Markdown renderers) give a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def fenced(language: str, text: str | None = None) -> list[str]:
    return re.findall(rf"^ *```{language}\n(.*?)^ *```", text or runbook(), re.M | re.S)


def queries(text: str | None = None) -> list[str]:
    """Every PromQL query: the ``promql`` blocks, one query each."""
    return [" ".join(block.split()) for block in fenced("promql", text)]


def shell_lines() -> list[str]:
    """Lines of ``sh`` blocks, and inline code that is a command line."""
    lines = [line.strip() for block in fenced("sh") for line in block.splitlines()]
    inline = re.findall(r"`((?:headway|curl|jq|kill|sqlite3|redis-cli) [^`]+)`", runbook())
    return [line for line in lines + inline if line]


@cache
def declared_labels() -> dict[str, frozenset[str]]:
    """Metric name → its label names, from every declaration in the package: the first
    argument a ``headway_*`` string, the labels a list argument (``["route", "code"]``,
    ``labels=[...]``), or, for a helper like the quality monitor's ``gauge(name, text,
    *labels)``, the strings after the help text."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "src" / "headway").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if not METRIC_NAME.fullmatch(first.value):
                continue
            lists = [arg for arg in node.args[1:] if isinstance(arg, ast.List | ast.Tuple)]
            lists += [
                keyword.value
                for keyword in node.keywords
                if keyword.arg in ("labels", "labelnames")
                and isinstance(keyword.value, ast.List | ast.Tuple)
            ]
            elements = [e for listed in lists for e in listed.elts] if lists else node.args[2:]
            labels = {e.value for e in elements if isinstance(e, ast.Constant)}
            found.setdefault(first.value, set()).update(str(label) for label in labels)
    return {name: frozenset(labels) for name, labels in found.items()}


@cache
def recorded_labels() -> dict[str, frozenset[str]]:
    """Recording rule → the labels its series keep (those it aggregates ``by``)."""
    return {
        rule["record"]: frozenset(
            label.strip()
            for group in re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"])
            for label in group.split(",")
            if label.strip()
        )
        for rule in rules()
        if "record" in rule
    }


def series_labels(name: str) -> frozenset[str] | None:
    """The labels series ``name`` can carry; None if nothing exports or records it."""
    if name in BUILTIN_SERIES:
        return BUILTIN_SERIES[name]
    recorded = recorded_labels()
    if name in recorded:
        return recorded[name]
    declared = declared_labels()
    if name in declared:
        return declared[name] | TARGET_LABELS
    for suffix in SUFFIXES:
        base = name.removesuffix(suffix)
        # A counter declared with `_total` exports no `_total_total`; histograms add `le`.
        if base != name and base in declared and not base.endswith("_total"):
            extra = {"le"} if suffix == "_bucket" else set()
            return declared[base] | TARGET_LABELS | extra
    return None


def label_problems(query: str) -> list[str]:
    """What in ``query`` no exported series can answer: unknown series, label names a
    selector or a grouping uses that none of its series carries."""
    problems = []
    unquoted = re.sub(r'"[^"]*"', '""', query)
    used: set[str] = set()
    for name in set(SERIES.findall(unquoted)):
        if series_labels(name) is None:
            problems.append(f"{name}: no code exports it and no rule records it")
        else:
            used.add(name)
    for name, matchers in SELECTOR.findall(query):
        labels = series_labels(name)
        if labels is None:
            if name not in used:
                problems.append(f"{name}: no code exports it and no rule records it")
            continue
        used.add(name)
        problems += [
            f"{name} has no label {label!r}"
            for label in MATCHER.findall(matchers)
            if label not in labels
        ]
    known = set().union(*(series_labels(name) or () for name in used))
    for group in GROUPING.findall(unquoted):
        for label in (part.strip() for part in group.split(",")):
            if label and label not in known:
                problems.append(f"no series of the query has label {label!r}")
    return [f"{query}\n    {problem}" for problem in problems]


def command_problems(line: str, root: Any) -> list[str]:
    """A ``headway …`` command line whose command or long options do not exist; ``root``
    is the CLI's click group (typer's own copy of click: duck-typed)."""
    if not re.match(r"([A-Z_][A-Z0-9_]*=\S*\s+)*(\S*/)?headway\s", line):
        return []
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]  # VAR=value before the command
    if not words or Path(words[0]).name != "headway":
        return []
    command = root
    options: list[str] = []
    for word in words[1:]:
        if word in ("|", "&&", ";") or word.startswith(("2>", ">")):
            break
        if word.startswith("--"):
            options.append(word.split("=", 1)[0])
        elif hasattr(command, "commands") and not options:
            sub = command.commands.get(word)
            if sub is None:
                return [f"{line}: `{command.name} {word}` is no command"]
            command = sub
    accepted = {"--help"} | {
        opt  # a boolean flag's off switch (``--no-prewarm``) is its secondary option
        for param in command.params
        for opt in (*param.opts, *getattr(param, "secondary_opts", ()))
    }
    return [f"{line}: {option} is no option of it" for option in options if option not in accepted]


def setting_exists(path: list[str]) -> bool:
    model: type[BaseModel] = Settings
    for position, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return False
        if position < len(path) - 1:
            annotation = field.annotation
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return False
            model = annotation
    return True


def log_fields() -> set[str]:
    """The keys a JSON log line can have: a line of a request, with an exception and the
    access fields, formatted by the formatter the processes use."""
    record = logging.LogRecord("headway.test", logging.ERROR, __file__, 1, "m", (), None)
    for name in ("request_id", "trace_id", "tenant", "route", *ACCESS_FIELDS):
        setattr(record, name, "x")
    try:
        raise RuntimeError("for the traceback field")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    return set(msgspec.json.decode(JsonFormatter().format(record)))


def gateway_paths() -> list[re.Pattern[str]]:
    """Every path template the gateway process's code names (``/admin/aliases/{alias}`` …)."""
    templates: set[str] = set()
    for folder in ("gateway", "control", "http"):
        for path in (ROOT / "src" / "headway" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and re.fullmatch(r"/[\w/{}-]+", node.value)
                ):
                    templates.add(node.value)
    return [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(t))) for t in templates]


def test_every_alert_links_the_runbook_section_named_after_it() -> None:
    anchors = {anchor(title) for title in sections()}
    problems = []
    for alert in alerts():
        url = alert["annotations"].get("runbook_url", "")
        expected = RUNBOOK_URL.format(anchor=alert["alert"].lower())
        if url != expected:
            problems.append(f"{alert['alert']}: runbook_url {url!r}, expected {expected!r}")
        path, _, fragment = url.partition("#")
        if not (ROOT / path).is_file() or fragment not in anchors:
            problems.append(f"{alert['alert']}: {url!r} is no heading of {path}")
    assert not problems, problems


def test_every_alert_has_one_section_and_every_section_names_an_alert() -> None:
    names = [alert["alert"] for alert in alerts()]
    titles = list(alert_sections())
    assert titles == names, "one section per alert, in the order of rules.yml"
    headings = re.findall(r"^#{1,6} (.+)$", runbook(), flags=re.MULTILINE)
    assert len(headings) == len(set(headings)), "headings must be unique (they are anchors)"


def test_each_section_has_what_on_call_needs_and_the_rules_severity() -> None:
    by_name = {alert["alert"]: alert for alert in alerts()}
    group_of = {
        rule["alert"]: group["name"]
        for group in yaml.safe_load((ROOT / "deploy/prometheus/rules.yml").read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    problems = []
    for name, body in alert_sections().items():
        first = body.strip().splitlines()[0]
        stated = SEVERITY_LINE.fullmatch(first)
        rule = by_name[name]
        expected = (rule["labels"]["severity"], rule.get("for", "0s"), group_of[name])
        if stated is None or stated.groups() != expected:
            problems.append(f"{name}: first line {first!r}, expected {expected}")
        positions = [body.find(part) for part in PARTS]
        missing = [part for part, at in zip(PARTS, positions, strict=True) if at < 0]
        if missing:
            problems.append(f"{name}: missing {missing}")
        elif positions != sorted(positions):
            problems.append(f"{name}: parts out of order")
        if not queries(body.split("**Resolved when.**")[0]):
            problems.append(f"{name}: no PromQL in its first checks")
        if not queries(body.split("**Resolved when.**")[1]):
            problems.append(f"{name}: no query that shows it resolved")
    assert not problems, problems


def test_every_promql_query_parses(tmp_path: Path) -> None:
    found = queries()
    assert len(found) >= 2 * len(alerts())
    checked = check_queries(found, tmp_path / "runbook-queries.yml", "runbook")
    numbered = "\n".join(f"runbook:query_{index}: {query}" for index, query in enumerate(found))
    assert checked.returncode == 0, checked.stdout + checked.stderr + "\n" + numbered
    assert f"SUCCESS: {len(found)} rules found" in checked.stdout


def test_the_promql_check_refuses_a_broken_query(tmp_path: Path) -> None:
    broken = ["sum by (pool (rate(headway_shed_total[5m]))"]
    assert check_queries(broken, tmp_path / "broken.yml", "runbook").returncode != 0


def test_every_query_reads_series_and_labels_the_code_exports() -> None:
    declared = declared_labels()
    assert declared["headway_requests_total"] == {"route", "code"}  # the scan reads lists
    assert declared["headway_quality_drift"] == {"version", "kind"}  # and helper arguments
    assert declared["headway_replica_ejections"] == {"pool"}  # and metric families
    problems = [problem for query in queries() for problem in label_problems(query)]
    assert not problems, "\n".join(problems)


def test_the_label_check_catches_what_would_answer_nothing() -> None:
    assert label_problems('sum(rate(headway_shed_total{tier="interactive"}[5m]))')
    assert label_problems("sum by (tenant) (rate(headway_shed_total[5m]))")
    assert label_problems("rate(headway_no_such_metric_total[5m])")
    assert label_problems('headway:no_such_rule{route="embeddings"}')
    assert not label_problems(
        "histogram_quantile(0.95, sum by (pool, le) "
        '(rate(headway_worker_queue_seconds_bucket{pool="embed"}[5m])))'
    )


def test_every_headway_command_and_flag_exists() -> None:
    root = typer.main.get_command(app)
    assert "tenants" in root.commands  # type: ignore[attr-defined]
    lines = [line for line in shell_lines() if re.search(r"(^|[\s/=])headway ", line)]
    assert len(lines) >= 10
    problems = [problem for line in lines for problem in command_problems(line, root)]
    assert not problems, problems
    assert command_problems("headway tenants sett x", root)  # the check can fail
    assert command_problems("headway tenants set x --ratee 1", root)


def test_every_setting_named_is_a_setting() -> None:
    text = runbook()
    named = {name: name.lower().split("__") for name in ENV_SETTING.findall(text)} | {
        name: name.split(".") for name in DOTTED_SETTING.findall(text)
    }
    assert len(named) >= 15
    unknown = sorted(name for name, path in named.items() if not setting_exists(path))
    assert not unknown, unknown
    assert not setting_exists(["gateway", "admission", "latency_budget_s"])


def test_every_console_page_and_dashboard_panel_named_exists() -> None:
    text = runbook()
    pages = set(CONSOLE_PAGE.findall(text))
    assert pages and pages <= set(PAGES), pages - set(PAGES)
    titles = {panel["title"] for panel in dashboard()["panels"]}
    named = {title for group in PANEL.findall(text) for title in re.findall(r'"([^"]+)"', group)}
    assert len(named) >= 15
    assert named <= titles, sorted(named - titles)


def test_every_logger_and_log_field_filtered_on_exists() -> None:
    lines = [line for line in shell_lines() if line.startswith("jq") and "headway.log" in line]
    assert lines
    loggers = {name for line in lines for name in LOGGER.findall(line)}
    assert len(loggers) >= 8
    problems = []
    for name in sorted(loggers - {ACCESS_LOGGER}):
        module = ROOT / "src" / Path(*name.split(".")).with_suffix(".py")
        if not module.is_file() or "getLogger(__name__)" not in module.read_text("utf-8"):
            problems.append(f"logger {name}: no module logs under that name")
    fields = log_fields()
    assert {"request_id", "trace_id", "tenant", "route", "outcome"} <= fields
    for line in lines:
        program = next(word for word in shlex.split(line)[1:] if not word.startswith("-"))
        program = re.sub(r'"[^"]*"', '""', program)
        used = set(JQ_FIELD.findall(program)) | {
            name.strip() for group in JQ_OBJECT.findall(program) for name in group.split(",")
        }
        problems += [f"{line}: no log line has {name!r}" for name in sorted(used - fields)]
    assert not problems, problems


def test_every_link_of_the_runbook_leads_to_a_heading() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", runbook())
    assert len(links) >= 10
    problems = []
    for link in links:
        if link.startswith("http"):
            continue
        target, _, fragment = link.partition("#")
        path = RUNBOOK.parent / target if target else RUNBOOK
        if not path.is_file():
            problems.append(f"{link}: no file {target}")
            continue
        headings = re.findall(r"^#{1,6} (.+)$", path.read_text("utf-8"), flags=re.MULTILINE)
        if fragment and fragment not in {anchor(heading) for heading in headings}:
            problems.append(f"{link}: no heading #{fragment} in {path.name}")
    assert not problems, problems


def test_every_gateway_path_named_is_one_it_serves() -> None:
    templates = gateway_paths()
    paths = {path for line in shell_lines() for path in GATEWAY_PATH.findall(line)}
    paths |= set(re.findall(r"`(?:PUT|PATCH|GET|POST) (/[^`\s]+)`", runbook()))
    assert {"/readyz", "/admin/replicas"} <= paths
    unknown = sorted(p for p in paths if not any(t.fullmatch(p) for t in templates))
    assert not unknown, unknown
