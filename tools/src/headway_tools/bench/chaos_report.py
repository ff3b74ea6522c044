"""``headway bench chaos``'s Markdown section: what held through the chaos, and the plan."""

from __future__ import annotations

from headway_tools.bench.chaos import (
    CHILD_ENV,
    DEADLINE_MS,
    EXECUTORS,
    GATEWAYS,
    QUOTA_BURST,
    QUOTA_OVERLOAD,
    QUOTA_RATE,
    QUOTA_TENANT,
    TEXTS,
    WINDOW_S,
    WORKERS,
    ChaosReport,
)
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import markdown_table

SECTION = "chaos"


def _held(count: int) -> str:
    return "0" if not count else f"**{count:,}**"


def render(report: ChaosReport, machine: Machine, command: str) -> str:
    spec, b, lines, q = report.spec, report.billing, report.lines, report.quota
    verdict = "**held**" if report.ok else "**did not hold**: " + "; ".join(report.failures)
    lost, refunded = len(b.lost), len(b.refunded_200) + len(b.wrong_texts)
    answered, rows = f"{b.answered_200:,} 200s (lines included)", f"{b.billable_rows:,} rows"
    checks = [
        ["every 200 billed (lost)", answered, _held(lost)],
        ["billed more than once", rows, _held(b.double_billed)],
        ["a 200 refunded or billed other texts", "", _held(refunded)],
        ["an error billed", "", _held(len(b.billed_after_error))],
        ["batch lines not in the files", f"{lines.lines:,} lines", _held(len(lines.missing))],
        ["batch lines written twice", f"{lines.in_output:,} written", _held(len(lines.duplicated))],
        ["batch lines answered and not billed", "", _held(len(lines.unbilled))],
        ["ledger aggregates off their rows", "", _held(len(report.aggregate_problems))],
        [
            f"quota over-admission ({q.tenant})",
            f"{q.granted_texts:,} texts granted; contract {q.contract_texts:,.0f}, allowance "
            f"{q.allowance_texts:,.0f}; {q.refused:,} refused 429",
            "0" if q.ok else f"**{q.granted_texts - q.allowance_texts:,.0f} texts**",
        ],
    ]
    deadlines = [
        [
            d.tenant,
            f"{d.sent:,}",
            f"{d.over_quota:,}",
            f"{d.in_deadline:,}",
            f"{d.share:.1%}",
        ]
        for d in report.deadlines
    ]
    steps = ", ".join(f"{name} × {count}" for name, count in sorted(report.steps_done.items()))
    statuses = ", ".join(
        f"{'no answer' if status == 0 else status}: {count:,}"
        for status, count in sorted(report.statuses.items())
    )
    windows = [
        [
            f"{w.start_s:.0f}–{w.start_s + WINDOW_S:.0f}",
            ", ".join(w.steps),
            f"{w.sent:,}",
            f"{w.no_answer:,}",
            f"{w.share:.0%}",
        ]
        for w in report.timeline
    ]
    missed = ", ".join(f"{why} {count:,}" for why, count in sorted(report.no_answer.items()))
    exits = (
        "\n".join(f"- {exit_}" for exit_ in report.unexpected_exits)
        if report.unexpected_exits
        else "none"
    )
    plan = "\n".join(step.describe() for step in report.plan)
    left = "; ".join(f"{action} {gateway}: {n:,}" for action, gateway, n in report.outbox_left)
    return "\n\n".join(
        [
            "## Chaos: the whole shared stack, every process killed or restarted in turn",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; 1-minute load average "
            f"{machine.load_average:.2f} at start; every process and the clients on it.",
            f"Separate processes (`bench/chaos.py`): throw-away Postgres (fsync on), Redis and "
            f"NATS JetStream (`sync_interval: always`), {len(WORKERS)} synthetic embed workers "
            f"({CHILD_ENV['HEADWAY_WORKER__SYNTHETIC__CALL_MS']} ms a call + "
            f"{CHILD_ENV['HEADWAY_WORKER__SYNTHETIC__TEXT_MS']} ms a text), {len(GATEWAYS)} "
            f"gateways relaying their outboxes to JetStream, the billing consumer, "
            f"{len(EXECUTORS)} batch executors on one durable consumer. Load: three "
            f"interactive tenants, open-loop Poisson requests of {TEXTS} texts with a "
            f"{DEADLINE_MS} ms deadline over both gateways ({spec.rate_rps:g} req/s each; "
            f"`{QUOTA_TENANT}` offered {QUOTA_OVERLOAD:g}× its quota of {QUOTA_RATE:g} texts/s, "
            f"burst {QUOTA_BURST:g}), and a batch of {spec.lines:,} one-text lines created "
            f"before the chaos. For {spec.chaos_s:.0f} s (seed {spec.seed}) a step every "
            f"{spec.every_s[0]:g}–{spec.every_s[1]:g} s SIGKILLs or restarts (SIGTERM, exit, "
            f"start) one process, down {spec.down_s[0]:g}–{spec.down_s[1]:g} s, targets in "
            "rounds of all of them; a gateway comes back with its id and outbox. Then the "
            "run settles by conditions (batch ended, outboxes empty, usage consumer "
            "drained, ledger count steady). The quota allowance is the documented bound "
            "(docs/tenants.md, `gateway/quota/fallback.py`): burst + rate × window, plus "
            "two bursts per Redis outage, plus burst ÷ N per gateway started during one.",
            f"Verdict: {verdict}. Steps: {steps or 'none'}. Settled "
            f"{'in' if report.settled else 'NOT, after'} {report.settle_s:.1f} s; the batch "
            f"{report.batch_status}"
            + (f" in {report.batch_s:.1f} s" if report.batch_s is not None else "")
            + f". Interactive answers: {statuses}"
            + (f" (no answer: {missed})" if missed else "")
            + f"; billed without a 200 (a client that "
            f"timed out, a gateway killed after the event was durable): "
            f"{b.billed_without_200:,}. Events left in a gateway's outbox once it was down "
            f"(relayed by the same id after its restart): {left or 'no gateway step'}.",
            markdown_table(["check", "of", "found"], checks, "llr"),
            "Interactive tenants (429s are the tenant's own quota and left out of the share):",
            markdown_table(
                ["tenant", "sent", "429", "200 within deadline", "share within deadline"],
                deadlines,
                "lrrrr",
            ),
            f"The interactive requests by {WINDOW_S:g} s of the run (all tenants; the steps "
            "that began in each window; a step's effect can last into the next):",
            markdown_table(
                ["seconds", "steps begun", "sent", "no answer", "within deadline"],
                windows,
                "llrrr",
            ),
            "Processes that exited on their own (started again, as a supervisor would):\n\n"
            + exits,
            f"The plan (replay: `headway bench chaos --seed {spec.seed} --chaos-s "
            f"{spec.chaos_s:g}`):\n\n```\n{plan}\n```",
        ]
    )
