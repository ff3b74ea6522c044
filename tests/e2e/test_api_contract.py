"""The OpenAPI document is the contract: a schema-driven fuzzer (schemathesis) against a
running ``headway up`` finds no request the document calls valid that the gateway refuses,
no server error, and no answer that differs from what the document describes.

This is the short run through real processes (uvicorn, the edge guard, a supervisor and its
workers, TCP): every phase schemathesis has, but few fuzzed cases an operation (~40 s). The
broad fuzzing, many cases an operation, every caller, the admin API's writes with the admin
key, runs in process (``tests/service/test_route_fuzzing.py``, with the hostile values of
``tests/service/test_hostile_inputs.py``).

Told to schemathesis beyond its defaults, and why:
- 503 and 504 are not server errors here but documented answers to a full queue and to a
  deadline of a millisecond or two (``X-Timeout-Ms: 1`` is valid and cannot be met);
  500 and 502 stay failures.
- 413 rejects a schema-violating request as well as 422 does (a body of thousands of
  over-long texts is over the byte limit before its texts are looked at).
- Most usage queries start in the last month (most random dates are more than the
  366 days a query may span before now).
- Most requests name the model being served: a schema cannot list which names exist,
  and a request for an unknown one is a 404, which says nothing about the rest.
- A schema-valid request to a usage route may be a 422: a schema cannot say that
  ``end`` must come after ``start`` (nor within 366 days of it), and such a range is
  refused by design. Every other check holds for them. ``/admin/audit``'s ``since`` and
  ``until`` are read the same way, with the same edges (a valid offset that puts a time
  before year 1).
- A schema-valid upload to ``/v1/files`` may be a 400: a schema can say a file is bytes,
  not that they are JSONL (a random file is refused by design, saying which line).
- The admin API's reads are fuzzed with the admin key; its writes with the tenant key, so
  they are all refused (403): a fuzzer with the admin key would delete the tenants and
  revoke the keys the run depends on.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headway.registry.sqlite import Registry
from tests.e2e.conftest import Up, start_up

pytestmark = pytest.mark.e2e

FUZZ_KEY = "fuzz-key"
EXAMPLES = 10
"""Fuzzed cases an operation (the coverage phase adds its own): 100 took 150-240 s."""
CONFIG = """
headers = {{ Authorization = "Bearer {tenant_key}" }}
workers = 2

[generation]
max-examples = {examples}
deterministic = true

[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "503", "504"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428",
  "429", "5xx"]

[parameters]
"body.model" = {{ dictionary = "models", probability = 0.9 }}
"query.start" = {{ dictionary = "starts", probability = 0.5 }}

[dictionaries]
models = {{ values = ["synthetic"] }}
starts = {{ values = ["{yesterday}", "{last_month}T00:00:00Z"] }}

[[operations]]
include-path = "/admin/replicas"
headers = {{ Authorization = "Bearer demo-admin-key" }}

[[operations]]
include-path = "/admin/usage"
headers = {{ Authorization = "Bearer demo-admin-key" }}
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422", "5xx"]

[[operations]]
include-name-regex = "^GET /admin/(tenants|models|aliases|splits|rollouts|audit)"
headers = {{ Authorization = "Bearer demo-admin-key" }}

[[operations]]
include-path = "/admin/audit"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422", "5xx"]

[[operations]]
include-path = "/v1/usage"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422", "5xx"]

[[operations]]
include-path = "/v1/files"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "5xx"]
"""


def served(up: Up) -> dict[tuple[str, str], float]:
    """Answers the gateway counted, by (route, status code)."""
    exposition = up.metrics()
    return {
        (sample.labels["route"], sample.labels["code"]): sample.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "headway_requests"
        for sample in family.samples
        if sample.name == "headway_requests_total"
    }


def test_a_schema_fuzzer_finds_every_answer_as_documented(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    registry = Registry(data_dir / "registry.sqlite3")
    registry.seed_demo()  # before `up` would, so the fuzzing tenant joins the demo ones
    # A quota the fuzzer cannot use up, so that large valid requests are served, not 429'd.
    registry.add_tenant(
        "fuzzer", "interactive", rate_texts_per_s=1e6, burst_texts=1e6, key=FUZZ_KEY
    )
    zero_cost = {
        "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "0",
        "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0",
        # The fuzzer sends wrong keys by the thousand from the address its good ones come
        # from: not a guesser the failed-key limiter should stop (tests/e2e/test_edge_guard.py).
        "HEADWAY_GATEWAY__FAILED_AUTH__ADDRESS_FAILURES": "1000000",
        "HEADWAY_GATEWAY__FAILED_AUTH__KEY_PREFIX_FAILURES": "1000000",
    }
    up = start_up(data_dir, "--backend", "synthetic", env=zero_cost)
    try:
        config = tmp_path / "schemathesis.toml"
        today = dt.date.today()
        recent = {
            "yesterday": (today - dt.timedelta(days=1)).isoformat(),
            "last_month": (today - dt.timedelta(days=30)).isoformat(),
        }
        config.write_text(
            CONFIG.format(tenant_key=FUZZ_KEY, examples=EXAMPLES, **recent), encoding="utf-8"
        )
        st = shutil.which("st", path=str(Path(sys.executable).parent))
        assert st, "schemathesis is a test dependency (pyproject's test extra)"
        run = subprocess.run(
            [st, "--config-file", str(config), "run", up.url + "/openapi.json", "--checks", "all"],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        counts = served(up)
        # It really ran: every model route was served, and refused many times over (Cohere
        # v2's and TEI's too: TEI's name no model, the synthetic one serves).
        model_routes = ("embeddings", "rerank", "cohere_embed", "cohere_rerank")
        for route in (*model_routes, "tei_embed", "tei_root", "tei_rerank"):
            assert counts.get((route, "200"), 0) >= 1, counts
            assert sum(n for (r, code), n in counts.items() if r == route and code != "200") >= 20
        assert counts.get(("tei_info", "200"), 0) >= 1, counts
        assert counts.get(("admin", "200"), 0) >= 1, counts
        for route in ("usage", "admin_usage"):
            assert counts.get((route, "200"), 0) >= 1, counts
            assert counts.get((route, "422"), 0) >= 5, counts
    finally:
        up.stop(signal.SIGTERM)
