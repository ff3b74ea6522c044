"""The isolation invariant, through real processes: while a victim tenant sends interactive
traffic at 30% of the pool's capacity and runs a 1,000-line batch, a hostile tenant and an
anonymous client run every attack of ``headway bench isolation`` at once (``bench/
attacks.py``: a line nested ~990 deep, lines larger than the attacker's burst, a
20,000-line batch, a cache probe of the victim's texts, /metrics on the client port, a
150 MB upload without a key, stalled bodies, 70 KiB of headers, guessed keys on three
kinds of route, the inputs that answered 500, a quota flood). Every attack is refused as
it should be, and the victim's p95 and share within the deadline stay within 10% of its
runs without the attacker (the worst of two: one quiet run's p95 moves from the next by as
much as the band), its batch within 1.5× its time alone. Each attack also has a
focused test beside its mechanism.

30%, not the bench's half: at half, the victim alone (beside its own batch) met its deadline
on 74-90% of requests from one run to the next on this project's 2-core machine (6 runs,
2026-12-03), so a 10% band compared noise and the test failed on unchanged code too; at
30% the victim alone met 97.5% (95.3% under every attack at once) in the run that chose it,
and what an attack costs it shows."""

from __future__ import annotations

import asyncio

import pytest

from headway_tools.bench.attacks import ATTACKS
from headway_tools.bench.isolation import (
    isolation,
    isolation_settings,
    prepare,
    stall_allowance_s,
    within_goals,
    worst_of,
)
from headway_tools.bench.served import serving

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # its figures need the machine alone

LOAD_X = 0.3


def test_no_attack_stalls_starves_or_observes_the_victim(tmp_path):
    settings = isolation_settings(tmp_path)
    victim_key, attacker_key, burst = prepare(settings)
    with serving(settings) as processes:
        _, _, quiet, (run,) = asyncio.run(
            isolation(
                processes.gateway_url,
                processes.gateway_url,
                victim_key,
                attacker_key,
                burst,
                [list(ATTACKS)],
                stall_allowance_s(settings),
                load_x=LOAD_X,
                quiet_runs=2,
            )
        )
    outcomes = {outcome.attack: outcome for outcome in run.outcomes}
    assert set(outcomes) == set(ATTACKS)
    broken = {name: o.seen for name, o in outcomes.items() if o.held is False}
    assert not broken, broken
    alone = worst_of(quiet)
    assert within_goals(alone, run.victim) == [], (alone, run.victim)
