"""The dashboard and the alert rules read only stream metrics that ``StreamMetrics``
exports: the e2e Prometheus test cannot ask them of an embedded ``headway up``, which
has no stream (its ``SHARED_MODE_ONLY``)."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from headway.metering.stream_metrics import StreamMetrics

ROOT = Path(__file__).resolve().parents[3]
READERS = (
    ROOT / "deploy" / "prometheus" / "rules.yml",
    ROOT / "deploy" / "grafana" / "dashboards" / "headway.json",
)


def test_every_stream_metric_read_is_one_exported() -> None:
    registry = CollectorRegistry()
    StreamMetrics(registry)
    exported = {metric.name for metric in registry.collect()}
    exported |= {name + "_total" for name in exported}  # a counter's sample name
    read = {
        name
        for path in READERS
        for name in re.findall(r"\bheadway_stream_\w+", path.read_text(encoding="utf-8"))
    }
    assert read, "nothing reads the stream metrics: drop this test and SHARED_MODE_ONLY"
    assert read <= exported, sorted(read - exported)
