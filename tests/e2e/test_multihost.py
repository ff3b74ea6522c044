"""Several hosts on one machine (network namespaces on a private switch), under open-loop
load: a worker host partitioned and healed, the Redis host cut (quota fallback), the NATS
host cut (usage events wait in the outbox, each billed once), a new worker host fetching
its model across the network.

One cluster (``multihost.Cluster``) serves every scenario, each with its own tenant, so
each one's answers and ledger rows are its own. Each scenario prints its figures (run
with ``-s`` to see them).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from headway.models.store import ModelStore
from headway.worker.backends.onnx import OnnxBackend
from headway_tools.testing.netns import Host, Network, list_namespaces, namespace_pids
from tests.e2e.conftest import alive, wait_for
from tests.e2e.multihost import (
    TENANTS,
    Cluster,
    outcomes_by_type,
    phases,
    running_cluster,
    samples,
)

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # its figures need the machine alone

PARTITION, QUOTA, BILLING, WEIGHTS = TENANTS
RATE = 40.0  # requests/s, 1-4 texts each: a small share of two synthetic workers' capacity


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("multihost")) as running:
        yield running


@contextlib.contextmanager
def partitioned(host: Host) -> Iterator[None]:
    """``host`` cut off from the others for the block, healed after it, even on a failure."""
    host.cut()
    try:
        yield
    finally:
        host.heal()


def report(title: str, *lines: str) -> str:
    """Print a scenario's figures (``-s`` shows them); the same text for its assertions."""
    text = "\n  ".join((f"[{title}]", *lines))
    print("\n" + text)
    return text


def test_a_partitioned_worker_host_costs_no_answer_but_sheds(cluster: Cluster) -> None:
    w1 = cluster.hosts["w1"]
    w1_url = cluster.worker_url("w1")
    before_types = outcomes_by_type(cluster.metrics(cluster.gateway_metrics_url), PARTITION)
    load = cluster.load(PARTITION, rate=RATE, seconds=15.0, seed=1)
    load.at(5.0)
    texts_at_cut = samples(cluster.metrics(w1_url), "headway_worker_texts_total")
    load.mark("cut")
    cut_at = time.perf_counter()
    with partitioned(w1):
        wait_for(lambda: cluster.replica_states()["w1"] != "ready", 5, "the gateway to see it")
        detected_s = time.perf_counter() - cut_at
        load.at(10.0)
    load.mark("heal")
    healed_at = time.perf_counter()
    wait_for(lambda: cluster.replica_states()["w1"] == "ready", 10, "w1 to be ready again")
    ready_again_s = time.perf_counter() - healed_at
    wait_for(
        lambda: samples(cluster.metrics(w1_url), "headway_worker_texts_total") > texts_at_cut,
        10,
        "w1 to serve again",
    )
    serving_again_s = time.perf_counter() - healed_at
    run = load.finish(timeout_s=30)
    types = outcomes_by_type(cluster.metrics(cluster.gateway_metrics_url), PARTITION) - before_types

    overall = run.result.report.overall
    split = phases(run, "cut", "heal")
    why = report(
        "partition: w1 cut for 5 s under load",
        f"{overall.offered} requests at {RATE:.0f}/s: served {overall.served}, "
        f"shed {overall.shed}, timeouts {overall.timeouts}, errors {overall.errors}",
        f"gateway outcomes: {dict(sorted(types.items()))}",
        *(phase.describe() for phase in split),
        f"cut seen by the gateway after {detected_s:.2f} s; after the heal w1 ready in "
        f"{ready_again_s:.2f} s, serving in {serving_again_s:.2f} s",
    )
    assert texts_at_cut > 0, why  # w1 had its share before the cut: the cut took it away
    assert overall.timeouts == overall.errors == overall.quota == 0, why
    assert set(types) <= {"ok", "overloaded"}, why  # every 503 is admission's
    assert types["ok"] == overall.served and types["overloaded"] == overall.shed, why
    assert all(phase.outcomes.get("ok", 0) > 0 for phase in split), why


def test_the_redis_host_cut_falls_back_to_local_quotas_and_back(cluster: Cluster) -> None:
    redis = cluster.hosts["redis"]

    def mode() -> str:
        exposition = cluster.metrics(cluster.gateway_metrics_url)
        modes = [m for m in ("redis", "local") if samples(exposition, "headway_quota_mode", mode=m)]
        return modes[0] if len(modes) == 1 else "?"

    assert mode() == "redis"
    before_types = outcomes_by_type(cluster.metrics(cluster.gateway_metrics_url), QUOTA)
    load = cluster.load(QUOTA, rate=RATE, seconds=12.0, seed=2)
    load.at(3.0)
    load.mark("cut")
    cut_at = time.perf_counter()
    with partitioned(redis):
        wait_for(lambda: mode() == "local", 10, "quotas to fall back to the local share")
        fallback_s = time.perf_counter() - cut_at
        load.at(8.0)
    load.mark("heal")
    healed_at = time.perf_counter()
    wait_for(lambda: mode() == "redis", 10, "quotas to return to Redis")
    back_s = time.perf_counter() - healed_at
    run = load.finish(timeout_s=30)
    types = outcomes_by_type(cluster.metrics(cluster.gateway_metrics_url), QUOTA) - before_types

    overall = run.result.report.overall
    split = phases(run, "cut", "heal")
    why = report(
        "redis: the Redis host cut for 5 s under load",
        f"{overall.offered} requests: served {overall.served}, shed {overall.shed}, "
        f"quota {overall.quota}, timeouts {overall.timeouts}, errors {overall.errors}",
        f"gateway outcomes: {dict(sorted(types.items()))}",
        *(phase.describe() for phase in split),
        f"local quotas {fallback_s:.2f} s after the cut; Redis again {back_s:.2f} s after the heal",
    )
    # Answered all along: no timeout, no error, and no 429 (the local share is the quota's
    # own, never zero); a 503 only where admission shed (a starved machine).
    assert overall.timeouts == overall.errors == overall.quota == 0, why
    assert set(types) <= {"ok", "overloaded"}, why
    assert types["ok"] == overall.served and types["overloaded"] == overall.shed, why
    assert all(phase.outcomes.get("ok", 0) > 0 for phase in split), why


def test_the_nats_host_cut_buffers_usage_and_bills_each_request_once(cluster: Cluster) -> None:
    nats = cluster.hosts["nats"]

    def outbox() -> float:
        return samples(cluster.metrics(cluster.gateway_metrics_url), "headway_usage_outbox_events")

    wait_for(lambda: outbox() == 0, 30, "the outbox to be empty before the cut")
    load = cluster.load(BILLING, rate=RATE, seconds=13.0, seed=3)
    load.at(3.0)
    load.mark("cut")
    peak = 0.0
    with partitioned(nats):
        while load.elapsed_s() < 8.0:
            peak = max(peak, outbox())
            time.sleep(0.1)  # the sampling period of the outbox's depth
    load.mark("heal")
    healed_at = time.perf_counter()
    run = load.finish(timeout_s=30)
    wait_for(lambda: outbox() == 0, 60, "the outbox to drain")
    drained_s = time.perf_counter() - healed_at
    served = run.result.report.overall.served

    def billed() -> int:
        return int(
            cluster.psql(f"SELECT count(*) FROM processed_requests WHERE tenant = '{BILLING.name}'")
        )

    wait_for(lambda: billed() >= served, 60, "every served request to reach the ledger")
    settled_s = time.perf_counter() - healed_at
    rows = billed()
    distinct = int(
        cluster.psql(
            "SELECT count(DISTINCT request_id) FROM processed_requests "
            f"WHERE tenant = '{BILLING.name}'"
        )
    )
    aggregated = int(
        cluster.psql(
            f"SELECT coalesce(sum(requests), 0) FROM hourly_usage WHERE tenant = '{BILLING.name}'"
        )
    )
    overall = run.result.report.overall
    split = phases(run, "cut", "heal")
    why = report(
        "nats: the NATS host cut for 5 s under load",
        f"{overall.offered} requests: served {served}, shed {overall.shed}, "
        f"timeouts {overall.timeouts}, errors {overall.errors}",
        *(phase.describe() for phase in split),
        f"outbox peak {peak:.0f} events; drained {drained_s:.2f} s after the heal; ledger "
        f"{rows} rows ({distinct} request ids, aggregate {aggregated}) for {served} served, "
        f"settled {settled_s:.2f} s after the heal",
    )
    assert overall.offered == served, why  # a NATS outage never fails a request
    # What was served while NATS was away waited in the outbox (sampled every 0.1 s).
    assert peak >= split[1].outcomes.get("ok", 0) / 2 > 0, why
    assert rows == distinct == aggregated == served, why  # each 200 billed, once


SENTENCES = [
    "A worker host joined the pool with an empty disk.",
    "It fetched its model from the gateway's store, file by file, each one checked.",
    "Then it answered through the gateway like every other replica.",
]


def test_a_new_worker_host_fetches_its_model_from_the_weights_store(cluster: Cluster) -> None:
    started = time.perf_counter()
    version = cluster.import_default_model()
    imported_s = time.perf_counter() - started
    store_dir = cluster.workdir / "w3" / "models"
    assert not store_dir.exists()  # w3's data dir is new: its store holds nothing
    started = time.perf_counter()
    cluster.start_worker("w3", backend="onnx", env=cluster.fetching_worker_env())
    cluster.wait_ready("w3", cluster.worker_url("w3"), timeout_s=150)
    ready_s = time.perf_counter() - started
    fetched = ModelStore(store_dir).verify(version)  # every file's hash again
    hosts = cluster.hosts
    assert cluster.dns is not None
    cluster.dns.serve([hosts[name].address for name in ("w1", "w2", "w3")])
    started = time.perf_counter()
    wait_for(lambda: cluster.replica_states().get("w3") == "ready", 15, "w3 to join via DNS")
    joined_s = time.perf_counter() - started
    answer = cluster.post(
        cluster.gateway_url + "/v1/embeddings",
        headers={"authorization": f"Bearer {WEIGHTS.key}"},
        json={"model": "all-MiniLM-L6-v2", "input": SENTENCES},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-model-version"] == version
    served = np.array([row["embedding"] for row in answer.json()["data"]], dtype=np.float32)
    source = OnnxBackend.load(ModelStore(cluster.workdir / "gw" / "models").get(version))
    expected = source.run(source.encode_texts(SENTENCES))
    cosine = (served * expected).sum(axis=1)
    fetch_line = re.search(
        rf"model {version[:12]} fetched from {re.escape(cluster.gateway_url)} and verified "
        r"\(([\d.]+) MB\) in ([\d.]+)s",
        cluster.log("w3"),
    )
    why = report(
        "weights: w3 with an empty data dir fetches all-MiniLM-L6-v2 from the gateway host",
        f"version {version[:12]}; imported on gw in {imported_s:.1f} s",
        f"w3's log: {fetch_line.group(0) if fetch_line else 'no fetch line'}",
        f"w3 started, fetched, verified, loaded and ready in {ready_s:.1f} s; in the pool "
        f"{joined_s:.2f} s after its A record",
        f"embeddings served by w3 vs the source store's: min cosine {cosine.min():.7f}, "
        f"max |diff| {np.abs(served - expected).max():.2e}",
    )
    assert fetch_line is not None, why  # it came across the link, from the gateway host
    assert fetched.version == version
    assert served.shape == expected.shape, why
    np.testing.assert_allclose(served, expected, atol=1e-5, err_msg=why)


CRASHING_RUN = """
import time
from headway_tools.testing.netns import Network
network = Network("hwstale").__enter__()
orphan = network.host("lost").run(["sleep", "300"])
print(orphan.pid, flush=True)
time.sleep(300)
"""


def test_a_crashed_runs_namespaces_and_processes_are_removed_at_start() -> None:
    crashed = subprocess.Popen([sys.executable, "-c", CRASHING_RUN], stdout=subprocess.PIPE)
    assert crashed.stdout is not None
    orphan = int(crashed.stdout.readline())
    crashed.kill()  # SIGKILL: nothing of its network is torn down
    crashed.wait(10)
    crashed.stdout.close()
    left = sorted(n for n in list_namespaces() if n.startswith(f"hwstale-{crashed.pid}-"))
    assert left == [f"hwstale-{crashed.pid}-lost", f"hwstale-{crashed.pid}-switch"]
    assert namespace_pids(left[0]) == [orphan]
    with Network("hwstale") as network:
        assert sorted(network.removed_stale) == left
        assert not [n for n in list_namespaces() if n in left]
        wait_for(lambda: not alive(orphan), 10, "the orphan to be gone")
    assert not [n for n in list_namespaces() if n.startswith("hwstale-")]
