"""Every route in the OpenAPI document, fuzzed in process by schemathesis: no request, valid
or not, from any caller, is answered with a server error, and the route's own caller gets
every answer as the document describes it.

Each operation is fuzzed with valid requests and with requests that break its schema
(``GenerationMode.POSITIVE`` and ``NEGATIVE``), a fixed number of each, derandomized; every
case is sent by each caller ``fuzzing.callers`` names for its path: the route's own (the
tenant's key, the admin key, the worker credential, the executor's token), then the keys a
hostile client would try there, then no key. The own caller's answers meet every check
schemathesis has (as ``tests/e2e/test_api_contract.py``'s run against real processes does),
the others' the checks that hold whoever calls: no 5xx, a documented status, a documented
content type. In process, the admin key may fuzz the admin API's writes too: the stack is
this test's alone.

Told to schemathesis beyond its defaults, and why (as in the contract run):
- 503 and 504 are documented answers (a deadline of a millisecond cannot be met); 500 and 502
  are failures.
- A schema-valid usage or audit query may be a 422 (``end`` before ``start``: no schema says
  it), a schema-valid upload a 400 (random bytes are no JSONL), a schema-valid ``Range`` a 416
  (past the end of the file), and a schema-valid admin write a 400 or 422 (rules no schema
  states: a split's weights that do not add up, a rollout's plan).
- Most requests name what exists where a schema cannot list it: the model served, the
  fuzzing tenant on a line, the stored versions, a start in the last month.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    status_code_conformance,
)

from tests.service.fuzzing import (
    TENANT_NAME,
    Gateway,
    LoopBridge,
    StackLoop,
    callers,
    full_gateway,
)

EXAMPLES = 8
"""Of each mode, per operation (a case costs ~10 ms to make and ~3 ms an answer)."""
ANY_CALLER = [not_a_server_error, status_code_conformance, content_type_conformance]
REFUSED_BY_DESIGN = '["2xx", "400", "401", "403", "404", "409", "416", "422", "5xx"]'

CONFIG = """
[generation]
deterministic = true
with-security-parameters = false

[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "503", "504"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "416", "422",
  "428", "429", "5xx"]

[parameters]
"body.model" = {{ dictionary = "models", probability = 0.9 }}
"query.start" = {{ dictionary = "starts", probability = 0.5 }}
"header.x-headway-tenant-id" = {{ dictionary = "tenants", probability = 0.9 }}
"path.version" = {{ dictionary = "versions", probability = 0.7 }}

[dictionaries]
models = {{ values = ["synthetic"] }}
starts = {{ values = ["{yesterday}", "{last_month}T00:00:00Z"] }}
tenants = {{ values = [{tenant_id}] }}
versions = {{ values = {versions} }}

[[operations]]
include-path-regex = "^/(v1/usage|v1/files|v1/weights/.*|admin/.*)$"
checks.positive_data_acceptance.expected-statuses = {refused}
"""


def config(versions: list[str], tenant_id: int) -> schemathesis.Config:
    """``versions``: the model versions that exist (the weights store's, the registry's);
    ``tenant_id``: the id of the tenant the executor's lines name."""
    today = dt.date.today()
    return schemathesis.Config.from_str(
        CONFIG.format(
            yesterday=(today - dt.timedelta(days=1)).isoformat(),
            last_month=(today - dt.timedelta(days=30)).isoformat(),
            tenant_id=tenant_id,
            refused=REFUSED_BY_DESIGN,
            versions=json.dumps(versions),
        )
    )


@pytest.fixture
def gateway_schema(tmp_path: Path) -> Iterator[tuple[Gateway, schemathesis.BaseSchema]]:
    stack_loop = StackLoop()
    gateway = stack_loop.run(full_gateway(tmp_path))
    try:
        bridge = LoopBridge(gateway.app, stack_loop.loop)
        served = gateway.stack.gateway.snapshots.current.models.values()
        versions = sorted({gateway.model.version, *(record.version for record in served)})
        tenant_id = gateway.stack.registry.tenant(TENANT_NAME).id
        schema = schemathesis.openapi.from_asgi(
            "/openapi.json", bridge, config=config(versions, tenant_id)
        )
        yield gateway, schema
    finally:
        stack_loop.run(gateway.close())
        stack_loop.close()


def security_free(operation: schemathesis.APIOperation) -> bool:
    """Whether the document says anyone may call ``operation`` (``/healthz``)."""
    return operation.definition.raw.get("security") == []


PLAIN_PATH_SCHEMA = {"type": "string", "minLength": 1}


def breakable(operation: schemathesis.APIOperation) -> bool:
    """Whether a request can break ``operation``'s schema and still be sent: it takes a body,
    a query or header parameter, or a path parameter narrower than a non-empty string."""
    raw = operation.definition.raw
    return "requestBody" in raw or any(
        p["in"] != "path" or p["schema"] != PLAIN_PATH_SCHEMA for p in raw.get("parameters", [])
    )


def fuzz(
    operation: schemathesis.APIOperation,
    mode: schemathesis.GenerationMode,
    served: Counter[tuple[str, int]],
    line: Mapping[str, str],
) -> None:
    """``EXAMPLES`` cases of ``mode``, each sent by every caller of ``callers``; ``served``
    counts the own callers' answers by (operation, status)."""

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # derandomized: a failure shows as found
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def send(case: schemathesis.Case) -> None:
        who = callers(case.path, line)
        for headers in who.served.values():
            # Whether a route checks its key is the refused callers' check, below.
            answer = case.call_and_validate(headers=dict(headers), excluded_checks=[ignored_auth])
            served[operation.label, answer.status_code] += 1
        for name, headers in who.refused.items():
            answer = case.call(headers=dict(headers))
            case.validate_response(answer, checks=ANY_CALLER, headers=dict(headers))
            assert security_free(operation) or not 200 <= answer.status_code < 300, (
                f"{operation.label} served {name}: {answer.status_code}"
            )

    send()


def test_no_route_answers_any_caller_with_a_server_error(gateway_schema) -> None:
    gateway, schema = gateway_schema
    operations = [result.ok() for result in schema.get_all_operations()]
    failures: list[str] = []
    served: Counter[tuple[str, int]] = Counter()
    for operation in operations:
        modes = [schemathesis.GenerationMode.POSITIVE]
        if breakable(operation):
            modes.append(schemathesis.GenerationMode.NEGATIVE)
        for mode in modes:
            try:
                fuzz(operation, mode, served, gateway.line)
            except Exception as exc:  # every route's failures, not only the first's
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
    # It really ran: every route but the console's was fuzzed (schemathesis leaves out the
    # document's own), and the model routes served.
    routes = gateway.app.handler.router.routes()  # type: ignore[attr-defined]
    fuzzed = {label for label, _ in served}
    described = {f"{r.method} {r.path}" for r in routes if not r.path.startswith("/console")}
    assert fuzzed == described - {"GET /openapi.json"}
    for operation in operations:
        parameters = operation.definition.raw.get("parameters", [])
        if any(p["name"] == "X-Timeout-Ms" for p in parameters):
            assert served[operation.label, 200] >= 1, operation.label
