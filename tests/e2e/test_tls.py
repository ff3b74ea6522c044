"""TLS on real processes: ``headway up`` with every hop encrypted (its workers serve
mutual TLS, its gateway HTTPS), a plain-HTTP gateway beside it calling the same worker
over mutual TLS, callers the worker refuses, and a certificate rotated on disk under the
running worker. The certificates come from ``headway certs init`` and ``certs issue``.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509

from headway.registry.sqlite import Registry
from headway.settings import TlsSettings
from headway.tls.folder import init
from headway.tls.names import WORKER_NAME
from headway_tools.bench.served import bench_settings, supervised
from headway_tools.testing.server import free_port
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

HEADWAY = (sys.executable, "-m", "headway")
TENANT = {"authorization": "Bearer demo-key-search-app"}
ADMIN = {"authorization": "Bearer demo-admin-key"}
BODY = {"model": "synthetic", "input": [f"text {i}" for i in range(40)]}  # 3 chunks
HEADER_TIMEOUT_S = 3.0
MARGIN_S = 15.0  # what a loaded 2-core machine may add to a timer before the close is seen


def headway(*args: str) -> str:
    done = subprocess.run([*HEADWAY, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def tls_env(certs: Path, role: str) -> dict[str, str]:
    """Internal mutual TLS as the role's own process is given it."""
    return {
        "HEADWAY_TLS__CA": str(certs / "ca.crt"),
        "HEADWAY_TLS__CERT": str(certs / f"{role}.crt"),
        "HEADWAY_TLS__KEY": str(certs / f"{role}.key"),
    }


@dataclass
class Stack:
    certs: Path
    worker_port: int
    worker: subprocess.Popen[bytes]
    https_gateway: str
    http_gateway: str
    https_metrics: str
    """The https gateway's operations listener."""

    def client(self, url: str) -> httpx.Client:
        trust = ssl.create_default_context(cafile=self.certs / "ca.crt")
        return httpx.Client(base_url=url, verify=trust, timeout=30)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """``headway up`` with every hop over TLS (one config: every process presents the
    worker's certificate), and beside it a plain-HTTP gateway of its own, presenting the
    gateway's certificate, calling the same worker over mutual TLS."""
    root = tmp_path_factory.mktemp("tls")
    certs = root / "certs"
    headway("certs", "init", "--dir", str(certs))
    settings = bench_settings(
        root,
        {"backend": "synthetic", "synthetic": {"call_ms": 0.0, "text_ms": 0.0}, "drain_delay_s": 0},
        {
            "registry_poll_s": 0.1,
            "edge": {"max_connections_per_client": 10_000, "header_timeout_s": HEADER_TIMEOUT_S},
        },
    )
    tls = TlsSettings(
        ca=certs / "ca.crt",
        cert=certs / "worker.crt",
        key=certs / "worker.key",
        public_cert=certs / "public.crt",
        public_key=certs / "public.key",
        reload_interval_s=0.2,
    )
    settings = settings.model_copy(update={"tls": tls})
    Registry(settings.registry_path).seed_demo()
    with supervised(settings) as supervisor:
        worker = next(c for c in supervisor.children if c.args[:2] == ["run", "worker"])
        assert worker.url.startswith("https://")
        http_port = free_port()
        env = tls_env(certs, "gateway") | {"HEADWAY_GATEWAY__REGISTRY_POLL_S": "0.1"}
        args = ["run", "gateway", "--port", str(http_port), "--ops-port", "0", "--id", "plain"]
        args += ["--data-dir", str(root)]
        with (root / "plain-gateway.log").open("w") as log:
            plain = subprocess.Popen(
                [*HEADWAY, *args, "--embed-urls", worker.url],
                env=os.environ | env,
                stderr=log,
            )
        found = Stack(
            certs,
            worker.address[1],
            worker.process,
            supervisor.gateways[0].url,
            f"http://127.0.0.1:{http_port}",
            supervisor.gateways[0].metrics_url,
        )
        try:
            for url in (found.https_gateway, found.http_gateway):
                with found.client(url) as client:
                    wait_for(lambda c=client: _embeds(c, plain), 30, f"{url} to embed")
            yield found
        finally:
            plain.terminate()
            plain.wait(30)


def _embeds(client: httpx.Client, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"{process.args} exited"
    try:
        return client.post("/v1/embeddings", json=BODY, headers=TENANT).status_code == 200
    except httpx.TransportError:
        return False


def test_the_gateway_serves_https_through_mutual_tls_workers_as_it_serves_http(stack):
    with stack.client(stack.https_gateway) as https, stack.client(stack.http_gateway) as http:
        assert stack.https_gateway.startswith("https://")  # as `headway up` printed it
        secure = https.post("/v1/embeddings", json=BODY, headers=TENANT)
        plain = http.post("/v1/embeddings", json=BODY, headers=TENANT)
        assert secure.status_code == plain.status_code == 200
        assert secure.json()["data"] == plain.json()["data"]
        assert len(secure.json()["data"]) == len(BODY["input"])
        for client in (https, http):
            replicas = client.get("/admin/replicas", headers=ADMIN).json()["pools"]["embed"]
            assert [(r["url"][:8], r["state"]) for r in replicas] == [("https://", "ready")]
        # The app sees the scheme: the console's cookies are Secure over https only.
        assert "Secure" in https.get("/console/login").headers["set-cookie"]
        assert "Secure" not in http.get("/console/login").headers["set-cookie"]
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(stack.https_gateway + "/healthz")  # a client that does not trust the CA
    # /metrics: on the operations listener only, with the public listener's certificate.
    assert stack.https_metrics.startswith("https://")
    assert stack.https_metrics != stack.https_gateway
    with stack.client(stack.https_metrics) as ops, stack.client(stack.https_gateway) as https:
        assert "headway_requests_total" in ops.get("/metrics").text
        assert https.get("/metrics").status_code == 404


def worker_call(stack: Stack, context: ssl.SSLContext) -> tuple[int, bytes]:
    """(serial of the worker's certificate, its answer to GET /healthz) on a new connection.

    A worker that refuses the client's certificate (TLS 1.3: after the client has sent it)
    closes the connection: the answer is empty, or the read fails."""
    with (
        socket.create_connection(("127.0.0.1", stack.worker_port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=WORKER_NAME) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        tls.sendall(b"GET /healthz HTTP/1.1\r\nhost: worker\r\nconnection: close\r\n\r\n")
        answer = b""
        try:
            while chunk := tls.recv(65536):
                answer += chunk
        except (ssl.SSLError, ConnectionResetError):
            assert not answer
    return x509.load_der_x509_certificate(der).serial_number, answer


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def test_a_worker_refuses_callers_without_a_certificate_of_its_ca(stack, tmp_path):
    ca = stack.certs / "ca.crt"
    gateway = client_context(ca, stack.certs / "gateway.crt", stack.certs / "gateway.key")
    assert worker_call(stack, gateway)[1].startswith(b"HTTP/1.1 200")
    assert worker_call(stack, client_context(ca))[1] == b""  # no certificate
    other = tmp_path / "other"
    init(other, days=1, ca_days=1)
    stranger = client_context(ca, other / "gateway.crt", other / "gateway.key")
    assert worker_call(stack, stranger)[1] == b""  # a certificate of another CA
    public = client_context(ca, stack.certs / "public.crt", stack.certs / "public.key")
    assert worker_call(stack, public)[1] == b""  # our CA's, but not for clients
    assert worker_call(stack, gateway)[1].startswith(b"HTTP/1.1 200")


def test_a_worker_certificate_rotated_on_disk_is_served_without_a_restart(stack):
    gateway = client_context(
        stack.certs / "ca.crt", stack.certs / "gateway.crt", stack.certs / "gateway.key"
    )
    before, _ = worker_call(stack, gateway)
    printed = headway("certs", "issue", "--dir", str(stack.certs), "--role", "worker")
    after = int(printed.split()[-1], 16)
    assert after != before
    wait_for(lambda: worker_call(stack, gateway)[0] == after, 10, "the new certificate")
    assert stack.worker.poll() is None  # the same process
    with stack.client(stack.https_gateway) as https:
        assert https.post("/v1/embeddings", json=BODY, headers=TENANT).status_code == 200


def test_the_batch_executor_sends_its_lines_to_the_https_gateway(stack):
    """`headway up`'s executor trusts the internal CA: its lines reach the gateway."""
    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings", "body": BODY}
        for i in range(3)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    batch_key = {"authorization": "Bearer demo-key-nightly-index"}
    with stack.client(stack.https_gateway) as https:
        uploaded = https.post(
            "/v1/files",
            headers=batch_key,
            data={"purpose": "batch"},
            files={"file": ("lines.jsonl", data)},
        )
        assert uploaded.status_code == 200, uploaded.text
        created = https.post(
            "/v1/batches",
            headers=batch_key,
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/embeddings",
                "completion_window": "24h",
            },
        )
        assert created.status_code == 200, created.text
        path = f"/v1/batches/{created.json()['id']}"

        def finished() -> dict[str, object] | None:
            batch = https.get(path, headers=batch_key).json()
            return batch if batch["status"] in ("completed", "failed") else None

        batch = wait_for(finished, 30, "the batch to finish", interval_s=0.2)
    assert batch["status"] == "completed", batch
    assert batch["request_counts"] == {"total": 3, "completed": 3, "failed": 0}


def test_a_client_that_never_says_hello_is_dropped_at_the_header_timeout(stack):
    """The handshake runs under the edge guard: a client that connects and never sends its
    ClientHello is closed after header_timeout_s (asyncio alone would hold it 60 s)."""
    address = urlsplit(stack.https_gateway)
    started = time.monotonic()
    with socket.create_connection((address.hostname, address.port), timeout=30) as silent:
        silent.settimeout(HEADER_TIMEOUT_S + MARGIN_S)
        assert silent.recv(1024) == b""  # closed without a word
    assert HEADER_TIMEOUT_S - 0.1 <= time.monotonic() - started < HEADER_TIMEOUT_S + MARGIN_S
    with stack.client(stack.https_gateway) as https:  # and a real client is still served
        assert https.get("/healthz").status_code == 200
