"""Whether a rollout may promote its candidate: a version derived from another (an int8
quantization) must agree with its source as well as the source's ``variant_gate`` asks
(``models.agreement``: mean cosine and nearest-neighbour agreement on the reference
texts). A candidate that is no variant, or whose source sets no gate, passes."""

from __future__ import annotations

from headway.registry.model import ModelRecord


def gate_refusal(candidate: ModelRecord, source: ModelRecord | None) -> str | None:
    """Why ``candidate`` may not be promoted; None: it may. ``source``: the version it was
    derived from, as the registry holds it (None: not there)."""
    agreement = candidate.agreement
    if agreement is None or source is None or source.variant_gate is None:
        return None
    gate = source.variant_gate
    short = [
        f"{name} {measured:.4f} < {least:.4f}"
        for name, measured, least in (
            ("mean cosine", agreement.mean_cosine, gate.min_mean_cosine),
            ("nearest-neighbour agreement", agreement.nn_agreement, gate.min_nn_agreement),
        )
        if measured < least
    ]
    if not short:
        return None
    return (
        f"candidate {candidate.version[:12]} ({candidate.name}) agrees with its source "
        f"{source.version[:12]} less than the source's gate asks: {'; '.join(short)} "
        f"(on {agreement.texts} reference texts)"
    )
