"""``headway up`` with JSON logs and OTLP export: no input text in any log line or span,
every access line names its request and trace, and one trace crosses the processes."""

from __future__ import annotations

import http.server
import signal
import threading
import uuid
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest

from headway.up.supervisor import METRICS_PREFIX
from tests.e2e.conftest import start_up, wait_for

pytestmark = pytest.mark.e2e

SEARCH_APP = {"authorization": "Bearer demo-key-search-app"}
CALLER_TRACE = uuid.uuid4().hex
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps every posted body."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def markers(n: int) -> list[str]:
    """Texts no log could contain by chance."""
    return [f"zqx{uuid.uuid4().hex}marker" for _ in range(n)]


def spans_of(bodies: list[bytes]) -> list[tuple[str, dict]]:
    found = []
    for body in bodies:
        for resource in msgspec.json.decode(body)["resourceSpans"]:
            service = next(
                a["value"]["stringValue"]
                for a in resource["resource"]["attributes"]
                if a["key"] == "service.name"
            )
            for scope in resource["scopeSpans"]:
                found += [(service, span) for span in scope["spans"]]
    return found


def test_logs_and_spans_never_hold_an_input_text_and_one_trace_crosses_the_processes(
    model_data_dir: Path,
):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Collector.bodies = []
    env = {
        "HEADWAY_OBSERVABILITY__LOGGING__FORMAT": "json",
        "HEADWAY_OBSERVABILITY__LOGGING__ACCESS": "true",
        "HEADWAY_OBSERVABILITY__TRACING__OTLP_ENDPOINT": (
            f"http://127.0.0.1:{server.server_port}/v1/traces"
        ),
    }
    up = start_up(model_data_dir, "--embed-replicas", "1", "--rerank-replicas", "1", env=env)
    secrets = []
    answers = {}
    try:
        with up.client() as client:
            for i in range(20):
                texts = markers(3)
                secrets += texts
                headers = SEARCH_APP | ({"traceparent": CALLER} if i == 0 else {})
                answer = client.post(
                    "/v1/embeddings",
                    headers=headers,
                    json={"model": "all-MiniLM-L6-v2", "input": texts},
                )
                assert answer.status_code == 200, answer.text
                answers[answer.headers["x-request-id"]] = answer.headers["traceresponse"]
            query, documents = markers(1)[0], markers(4)
            secrets += [query, *documents]
            ranked = client.post(
                "/v1/rerank", headers=SEARCH_APP, json={"query": query, "documents": documents}
            )
            assert ranked.status_code == 200, ranked.text
            secret = markers(1)[0]
            refused = [
                client.post(
                    "/v1/embeddings",
                    headers=SEARCH_APP,
                    json={"model": "all-MiniLM-L6-v2", "input": [secret], "extra": secret},
                ),
                client.post(
                    "/v1/embeddings", headers=SEARCH_APP, json={"model": secret, "input": [secret]}
                ),
                client.post(
                    "/v1/embeddings",
                    headers={"authorization": f"Bearer {secret}"},
                    json={"input": [secret]},
                ),
                client.post(
                    "/v1/embeddings",
                    headers=SEARCH_APP,
                    json={"model": "all-MiniLM-L6-v2", "input": [secret * 2000]},
                ),
            ]
            secrets += [secret]
            assert all(400 <= r.status_code < 500 for r in refused), [
                r.status_code for r in refused
            ]
            # an answer may name the model the caller asked for (as OpenAI's do), never a text
            assert [secret in r.text for r in refused] == [False, True, False, False]
    finally:
        assert up.stop(signal.SIGTERM) == 0  # the exporters post what is left as they stop
        server.shutdown()
        server.server_close()

    stream = "".join(up.lines)
    logged = stream + "".join(
        path.read_text(errors="replace") for path in model_data_dir.rglob("*.log")
    )
    exported = b"".join(Collector.bodies).decode()
    leaks = [s for s in secrets if s in logged or s in exported]
    assert leaks == [], f"{len(leaks)} input texts found in logs or spans"

    plain = [line for line in up.lines if not line.startswith("{")]
    assert [line.split(":")[0].split(" on ")[0] for line in plain] == [
        METRICS_PREFIX.split(":")[0],
        "headway is ready",
        "operator console",
    ], plain[:5]
    lines = [msgspec.json.decode(line) for line in up.lines if line.startswith("{")]
    assert len(lines) > 20
    access = [line for line in lines if line["logger"] == "headway.access"]
    by_request = {line["request_id"]: line for line in access if line.get("route") == "embeddings"}
    for request_id, traceresponse in answers.items():
        line = by_request[request_id]
        assert line["trace_id"] == traceresponse.split("-")[1]
        assert line["status"] == 200 and line["outcome"] == "ok" and line["tenant"] == "search-app"
    worker_access = [line for line in access if line.get("route") == "embed"]
    assert CALLER_TRACE in {line["trace_id"] for line in worker_access}  # the worker's lines too

    spans = wait_for(lambda: spans_of(Collector.bodies), 10, "spans exported")
    crossing = [(service, span) for service, span in spans if span["traceId"] == CALLER_TRACE]
    services = {service for service, _ in crossing}
    assert services == {"headway-gateway", "headway-worker-embed"}
    names = {span["name"] for _, span in crossing}
    assert {"POST /v1/embeddings", "POST /internal/embed", "batch", "model.run"} <= names
