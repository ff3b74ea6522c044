"""``headway bench isolation``'s Markdown section: the victim alone and beside each attack."""

from __future__ import annotations

from headway_tools.bench.host import Machine
from headway_tools.bench.isolation import (
    BATCH_GOAL,
    BATCH_LINES,
    DEADLINE_MS,
    DEADLINE_SHARE_GOAL,
    HEAD_START_S,
    LINE_TEXTS,
    LOAD_X,
    P95_GOAL,
    REPLICAS,
    SHARED_GATEWAYS,
    SYNTHETIC,
    TEXTS_PER_REQUEST,
    WINDOW_S,
    AttackRun,
    IsolationResults,
    VictimFigures,
    within_goals,
)
from headway_tools.bench.stats import fmt_latency, markdown_table

SECTION = "isolation"
SHARED_SECTION = "isolation-shared"


def _held(run: AttackRun) -> str:
    verdicts = {outcome.held for outcome in run.outcomes}
    if False in verdicts:
        return "**no**"
    return "yes" if True in verdicts else "(by the victim's figures)"


def _batch(figures: VictimFigures) -> str:
    return "**never**" if figures.batch_s is None else f"{figures.batch_s:.1f}"


def _victim_cells(figures: VictimFigures) -> list[str]:
    return [fmt_latency(figures.p95_ms), f"{figures.in_deadline:.1%}", _batch(figures)]


def render(results: IsolationResults, machine: Machine, command: str) -> str:
    alone = results.alone
    rows = [["(none: the victim alone)", "", *_victim_cells(alone), ""]]
    for run in results.runs:
        missed = within_goals(alone, run.victim)
        rows.append(
            [
                ", ".join(run.attacks) if len(run.attacks) < 3 else "all at once",
                _held(run),
                *_victim_cells(run.victim),
                "met" if not missed else "**missed**: " + "; ".join(missed),
            ]
        )
    seen = [
        f"- `{outcome.attack}`: {outcome.seen}"
        for run in results.runs
        if len(run.attacks) == 1
        for outcome in run.outcomes
    ]
    seen += [
        f"- `{outcome.attack}`, beside every other attack: **{outcome.seen}**"
        for run in results.runs
        if len(run.attacks) > 1
        for outcome in run.outcomes
        if outcome.held is False
    ]
    return "\n\n".join(
        [
            "## Isolation: a victim tenant beside a hostile tenant and an anonymous client"
            + (", in the shared mode" if results.shared else ""),
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; 1-minute load average "
            f"{machine.load_average:.2f} at start; the victim's client, the attacker's and "
            f"every process on the same machine. {results.seconds:.0f} s in all.",
            (
                f"The shared mode: Redis, Postgres and NATS JetStream (throw-away servers), "
                f"{SHARED_GATEWAYS} gateways, the victim on the first and the attacker on the "
                "second. "
                if results.shared
                else ""
            )
            + f"`headway up` as shipped (quotas, admission and the results cache on) with "
            f"{REPLICAS} synthetic workers ({SYNTHETIC['call_ms']:g} ms a call + "
            f"{SYNTHETIC['text_ms']:g} ms a text, spent waiting), the batch executor, and two "
            "tenants: the victim (interactive, a quota far above its load) and the attacker "
            "(interactive, the default quota). Capacity, closed loop: "
            f"{results.capacity_texts_per_s:,.0f} texts/s. Each run: the attack starts in a "
            f"process of its own, {HEAD_START_S:g} s later the victim creates a batch of "
            f"{BATCH_LINES:,} lines of {LINE_TEXTS} texts and sends open-loop Poisson requests "
            f"of {TEXTS_PER_REQUEST} texts at {LOAD_X:.0%} of capacity "
            f"({results.rate_rps:,.1f} req/s, deadline {DEADLINE_MS} ms) for {WINDOW_S:g} s. "
            f"Goals beside an attack: p95 at most {P95_GOAL:.0%} and the share within the "
            f"deadline at most {DEADLINE_SHARE_GOAL:.0%} worse than alone; the batch within "
            f"{BATCH_GOAL:g}× its time alone.",
            markdown_table(
                [
                    "attack",
                    "refused as it should be",
                    "victim p95 ms",
                    "within deadline",
                    "victim batch s",
                    "goals",
                ],
                rows,
                "llrrrl",
            ),
            "What each attack saw (`bench/attacks.py` says what each sends and when it holds):",
            "\n".join(seen),
        ]
    )
