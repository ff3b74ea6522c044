"""``headway loadgen``: the load generator, open-loop for the gateway's API, or closed-loop.

Open loop (``run_load``, what ``headway loadgen`` runs): requests leave on a
schedule whatever the latency, as real traffic does, and latency is measured
from each request's *intended* send time, so a stalled server shows up in every
request that waited behind the stall (no coordinated omission). The pieces, in
the order a run uses them:

- ``spec``: a TOML/JSON load spec (or CLI-like arguments) → ``Workload`` + ``Schedule``
- ``schedule``: intended send times (fixed spacing or Poisson, in rate steps)
- ``workload``: weighted request classes, with bodies built before the clock starts
  from the words of ``corpus``
- ``plan``: what a run sends, timed requests; a workload on a schedule becomes one
- ``trace``: a recorded load as JSON lines (offsets, tenants, text lengths; no texts,
  no keys), and ``replay``: a trace → a plan (replay) and a plan → a trace (record);
  ``usage_trace``: the ledger's usage rows → a trace
- ``client``: a keep-alive connection pool with per-request deadlines, over the
  product's ``transport.connection`` (one HTTP/1.1 connection that parses its responses
  in place; the gateway's worker hop runs on it too)
- ``run``: fires each plan's request at its time and records what came back
- ``recorder``: per-request records → summaries (overall, per class, per second)
- ``report``: a summary as a plain-text table or a JSON-able dict

Closed loop (``closed.run_closed_loop``, what the benchmarks measure throughput
with): a fixed number of requests outstanding, any pre-encoded bodies to any
endpoint (a worker's too), on the same ``client``.
"""

from __future__ import annotations

from headway_tools.loadgen.closed import Body, ClosedLoopResult, post, run_closed_loop
from headway_tools.loadgen.errors import InvalidSpec, LoadgenError, MalformedReport, RequestFailed
from headway_tools.loadgen.plan import Plan, TimedRequest, plan_schedule
from headway_tools.loadgen.recorder import (
    ClientStats,
    Outcome,
    Record,
    Records,
    Report,
    Summary,
    summarize,
)
from headway_tools.loadgen.replay import plan_trace, trace_of
from headway_tools.loadgen.report import from_json, render_text, to_json
from headway_tools.loadgen.run import LoadResult, run_load, run_load_sync, run_plan, run_plan_sync
from headway_tools.loadgen.schedule import Schedule, Step
from headway_tools.loadgen.spec import LoadSpec, load_spec, parse_range, parse_spec, spec_from_args
from headway_tools.loadgen.trace import Trace, TraceRequest, load_trace, parse_trace, write_trace
from headway_tools.loadgen.workload import RequestClass, Workload

__all__ = [
    "Body",
    "ClientStats",
    "ClosedLoopResult",
    "InvalidSpec",
    "LoadResult",
    "LoadSpec",
    "LoadgenError",
    "MalformedReport",
    "Outcome",
    "Plan",
    "Record",
    "Records",
    "Report",
    "RequestClass",
    "RequestFailed",
    "Schedule",
    "Step",
    "Summary",
    "TimedRequest",
    "Trace",
    "TraceRequest",
    "Workload",
    "from_json",
    "load_spec",
    "load_trace",
    "parse_range",
    "parse_spec",
    "parse_trace",
    "plan_schedule",
    "plan_trace",
    "post",
    "render_text",
    "run_closed_loop",
    "run_load",
    "run_load_sync",
    "run_plan",
    "run_plan_sync",
    "spec_from_args",
    "summarize",
    "to_json",
    "trace_of",
    "write_trace",
]
