"""Choosing a split alias's version for one request (gateway/splits.py)."""

from __future__ import annotations

import random

import pytest

from headway.gateway.splits import choose_version, shadow_version, sticky_point
from headway.registry.model import Shadow, Split

A, B, C = "a" * 64, "b" * 64, "c" * 64
BOTH = frozenset({A, B})


def shares(split: Split, keys: int = 4000, served: frozenset[str] = BOTH) -> dict[str, float]:
    counts: dict[str, int] = {}
    for i in range(keys):
        chosen = choose_version(split, f"tenant-{i}", None, served, 0.0)
        assert chosen is not None
        counts[chosen] = counts.get(chosen, 0) + 1
    return {version: n / keys for version, n in counts.items()}


def test_sticky_by_tenant_splits_tenants_by_weight():
    measured = shares(Split("m", ((A, 90), (B, 10))))
    assert measured[B] == pytest.approx(0.10, abs=0.02)
    assert measured[A] == pytest.approx(0.90, abs=0.02)


def test_a_tenant_sees_one_version_whatever_the_draw():
    split = Split("m", ((A, 50), (B, 50)))
    seen = {choose_version(split, "acme", None, BOTH, random.random()) for _ in range(200)}
    assert len(seen) == 1


def test_sticky_by_user_keys_on_the_user_and_falls_back_to_the_tenant():
    split = Split("m", ((A, 50), (B, 50)), sticky="user")
    by_user = {choose_version(split, "acme", f"user-{i}", BOTH, 0.0) for i in range(64)}
    assert by_user == {A, B}  # one tenant's users spread over both versions
    alone = {choose_version(split, "acme", None, BOTH, random.random()) for _ in range(50)}
    assert len(alone) == 1


def test_not_sticky_draws_each_request():
    split = Split("m", ((A, 50), (B, 50)), sticky="none")
    assert choose_version(split, "acme", None, BOTH, 0.1) == A
    assert choose_version(split, "acme", None, BOTH, 0.9) == B


def test_a_growing_canary_keeps_the_callers_it_had():
    small, large = Split("m", ((A, 95), (B, 5))), Split("m", ((A, 50), (B, 50)))
    on_canary = [f"t{i}" for i in range(2000) if choose_version(small, f"t{i}", None, BOTH, 0) == B]
    assert on_canary
    assert all(choose_version(large, t, None, BOTH, 0) == B for t in on_canary)


def test_only_served_versions_take_traffic():
    split = Split("m", ((A, 50), (B, 50)))
    assert shares(split, 200, frozenset({A})) == {A: 1.0}
    assert choose_version(split, "acme", None, frozenset({C}), 0.0) is None


def test_a_pin_wins_over_the_weights():
    split = Split("m", ((A, 100),), pins=(("acme", B),))
    assert choose_version(split, "acme", None, BOTH, 0.0) == B
    assert choose_version(split, "other", None, BOTH, 0.0) == A


def test_sticky_points_are_uniform_and_differ_per_alias():
    points = [sticky_point("m", f"k{i}") for i in range(5000)]
    assert all(0 <= p < 1 for p in points)
    assert sum(p < 0.5 for p in points) / len(points) == pytest.approx(0.5, abs=0.03)
    assert sticky_point("m", "k") != sticky_point("n", "k")


def test_shadow_share_and_served():
    split = Split("m", ((A, 1),), shadow=Shadow(B, 0.25))
    assert shadow_version(split, BOTH, 0.2) == B
    assert shadow_version(split, BOTH, 0.3) is None
    assert shadow_version(split, frozenset({A}), 0.0) is None
    assert shadow_version(Split("m", ((A, 1),)), BOTH, 0.0) is None
