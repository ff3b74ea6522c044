"""What the registry holds, as plain immutable values.

Tenants and their keys; model versions (content hashes) and the aliases that name
them; a traffic ``Split`` on an alias (weights per version, stickiness, per-tenant
pins, a shadow copy); ``Rollout``s that move an alias from one version to another by
steps; the per-gateway ``Observation``s a rollout is judged on; and the append-only
``AuditEntry`` of every write. The gateway reads one ``Snapshot`` of it at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from headway.models.agreement import Agreement

Tier = Literal["interactive", "batch"]
Role = Literal["tenant", "admin"]
TIERS: tuple[Tier, ...] = ("interactive", "batch")

TENANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""The one rule for a new tenant's name (the admin API's body, the CLI, the registry): it
goes into paths, metric labels and audit targets as it is."""
TENANT_NAME_RULE = (
    "1 to 64 characters: letters, digits, '.', '_' and '-', the first a letter or digit"
)
MODEL_KINDS = ("embedding", "cross-encoder")

Sticky = Literal["tenant", "user", "none"]
STICKY: tuple[Sticky, ...] = ("tenant", "user", "none")
"""How a split keeps a caller on one version: by tenant, by the request's ``user``
field (falling back to the tenant when absent), or not at all (each request drawn)."""

RolloutState = Literal[
    "running", "paused", "halted", "awaiting_approval", "succeeded", "rolled_back", "aborted"
]
ACTIVE_STATES: frozenset[RolloutState] = frozenset(
    {"running", "paused", "halted", "awaiting_approval"}
)
"""A rollout in one of these still owns its alias's split; at most one per alias."""

SHADOW_STEP = 0
"""A rollout step of 0 percent: the candidate gets a shadow copy of traffic, no answers."""

ObservedRole = Literal["primary", "candidate", "shadow"]


BatchLimitName = Literal["max_files", "max_stored_bytes", "max_open_batches"]
BATCH_LIMITS: tuple[BatchLimitName, ...] = ("max_files", "max_stored_bytes", "max_open_batches")
"""A tenant's own bounds on the Batch API, by the name the admin API and the CLI use."""


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A tenant's overrides of the gateway's per-tenant Batch API bounds
    (``batches.max_files_per_tenant`` and its neighbours); None: the setting applies."""

    max_files: int | None = None
    max_stored_bytes: int | None = None
    max_open_batches: int | None = None


@dataclass(frozen=True, slots=True)
class Tenant:
    id: int
    """Given once, never to another tenant (not even after this one is deleted): what its
    usage, and anything else that must not pass to a later tenant of its name, is keyed by."""
    name: str
    tier: Tier
    rate_texts_per_s: float
    burst_texts: float
    batch_limits: BatchLimits = BatchLimits()


@dataclass(frozen=True, slots=True)
class TenantDeletion:
    """The record of a deleted tenant, written in the deletion's transaction: what it left
    outside the registry (batches, files, cache entries, keyed by its id there) is
    deleted from it, by whoever finishes it first, as many times as it takes."""

    tenant_id: int
    name: str
    deleted_at: float
    blobs: tuple[str, ...] | None
    """The stored contents its files named, listed before its file records went, to
    delete where no other file names them; None: not listed yet."""
    finished_at: float | None
    """None: still to finish (a new tenant may have the name meanwhile: it has another id)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a key belongs to: a tenant, or the operator (admin, no tenant).

    ``expires_at`` (unix seconds) is set on a key being rotated out: it works until then.
    """

    role: Role
    tenant: Tenant | None
    key_digest: bytes
    expires_at: float | None = None

    @property
    def key_id(self) -> str:
        """Names the key in usage events, the audit log and logs: the first 8 bytes of
        its digest, in hex."""
        return key_id_of(self.key_digest)


def key_id_of(digest: bytes) -> str:
    return digest[:8].hex()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as the admin API lists it: never the key, only its id and dates."""

    key_id: str
    tenant: str | None
    """None: an admin key."""
    role: Role
    created_at: float
    expires_at: float | None
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class ModelRecord:
    version: str
    name: str
    kind: str
    dimensions: int
    quantization: str
    size_bytes: int = 0
    created_at: float = 0.0
    max_tokens: int = 0
    """The most tokens the model reads of a text (it truncates the rest); 0: not recorded
    (a version registered before the registry kept it)."""
    matryoshka_dimensions: tuple[int, ...] = ()
    """Narrower widths the model was trained to be truncated to (Matryoshka representation
    learning): a request may ask for one of them. Empty: only ``dimensions``."""
    prompts: tuple[tuple[str, str], ...] = ()
    """(name, text) pairs, sorted by name: the text the gateway puts before each input of a
    request that asks for the prompt (the manifest's, sentence-transformers')."""
    default_prompt_name: str | None = None
    """The prompt a request asking for none gets; None: no prompt."""
    agreement: Agreement | None = None
    """A derived version's (int8) agreement with its source (its manifest's)."""
    variant_gate: VariantGate | None = None
    """The least agreement a version derived from this one must have for a rollout to
    promote it; None: no gate."""


@dataclass(frozen=True, slots=True)
class VariantGate:
    """What a rollout asks of a variant's agreement with its source before it promotes it."""

    min_mean_cosine: float
    min_nn_agreement: float


@dataclass(frozen=True, slots=True)
class Shadow:
    """A share of an alias's requests copied to ``version``: never awaited, never billed."""

    version: str
    share: float
    """0 < share <= 1: the fraction of the alias's requests copied."""


@dataclass(frozen=True, slots=True)
class Split:
    """Traffic of an alias across versions.

    ``weights``: (version, weight) pairs, weights > 0 (relative: they need not sum to
    1); ``pins``: (tenant name, version) pairs that override the weights for a tenant.
    A version named anywhere here is served by the alias's pool.
    """

    alias: str
    weights: tuple[tuple[str, float], ...]
    sticky: Sticky = "tenant"
    pins: tuple[tuple[str, str], ...] = ()
    shadow: Shadow | None = None

    def versions(self) -> frozenset[str]:
        named = {version for version, _ in self.weights} | {version for _, version in self.pins}
        if self.shadow is not None:
            named.add(self.shadow.version)
        return frozenset(named)


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """What a rollout was asked to do: the candidate's share at each step (``SHADOW_STEP``
    = a shadow copy only), how long each step is watched, and what it must show."""

    steps: tuple[int, ...] = (SHADOW_STEP, 5, 25, 50, 100)
    interval_s: float = 60.0
    max_error_rate: float = 0.01
    """The candidate's share of failed requests (5xx on our side) in an interval."""
    max_latency_ratio: float = 1.5
    """The candidate's p95 over the primary's, in the same interval."""
    min_agreement: float = 0.95
    """Shadow steps: mean agreement with the primary (embeddings: cosine per text;
    rerank: Spearman rank correlation)."""
    min_requests: int = 20
    """Fewer candidate requests (or shadow comparisons) than this in an interval: too
    little to judge, and the rollout halts rather than passes."""
    shadow_share: float = 1.0
    approval: bool = False
    """Promotion to 100% waits for an approval by a second admin key."""


@dataclass(frozen=True, slots=True)
class Rollout:
    id: int
    alias: str
    primary: str
    """The version the alias served when the rollout started (where a rollback returns)."""
    candidate: str
    plan: RolloutPlan
    state: RolloutState
    step: int
    """Index into ``plan.steps``."""
    step_started_at: float | None
    """Unix time the current step's interval began; None until the candidate is served."""
    reason: str
    """Why it is in its state (the failed check, the halt, who paused it)."""
    started_by: str
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class Observation:
    """One gateway's counts for one version in one step of a rollout (cumulative within
    the step; each gateway upserts its own row, the analysis sums every gateway's)."""

    rollout_id: int
    step: int
    gateway_id: str
    role: ObservedRole
    requests: int = 0
    errors: int = 0
    latency_buckets: tuple[int, ...] = ()
    """Counts per bucket of ``rollouts.stats.LATENCY_BOUNDS_S`` (mergeable by addition)."""
    agreement_n: int = 0
    agreement_sum: float = 0.0
    top1_n: int = 0
    top1_agree: int = 0


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a registry write, for the audit log: an admin key id, ``cli:<user>``, or
    ``rollout:<gateway id>`` (the automated controller), and the request it came in on."""

    who: str
    request_id: str = ""


SYSTEM = Actor("system")
"""Writes no person asked for: the demo seed, ``headway up`` importing the default model,
a worker registering the synthetic model it serves."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: float
    actor: str
    action: str
    """``<resource>.<verb>``: tenant.create, key.rotate, split.set, rollout.advance, ..."""
    target: str
    """The resource written: ``tenant:search-app``, ``alias:minilm``, ``rollout:3``."""
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    request_id: str


@dataclass(frozen=True, slots=True)
class AuditQuery:
    actor: str | None = None
    action: str | None = None
    """Exact, or a prefix ending in a dot (``rollout.``)."""
    target: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 100
    before_id: int | None = None
    """Pagination: entries with a smaller id (newest first)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the gateway needs on the request path, loaded at once.

    ``principals`` is keyed by SHA-256 digest of the key; ``models`` maps each alias
    (to its primary version's record) and each version (to itself); ``splits`` holds
    the aliases that split traffic; ``changes`` is the registry's change counter when
    it was read; ``tenants`` names every tenant.
    """

    principals: dict[bytes, Principal] = field(default_factory=dict)
    models: dict[str, ModelRecord] = field(default_factory=dict)
    splits: dict[str, Split] = field(default_factory=dict)
    changes: int = 0
    tenants: dict[str, Tenant] = field(default_factory=dict)
    """Every tenant by name, with keys or not (a batch runs on after its key is revoked)."""
    tenant_ids: dict[int, Tenant] = field(default_factory=dict)
    """The same tenants by id: a batch line names its tenant by id."""

    def resolve_model(self, name: str) -> ModelRecord | None:
        return self.models.get(name)

    def aliases_of_kind(self, kind: str) -> list[str]:
        """Every alias (not a version) whose primary is a model of ``kind``."""
        return [
            name
            for name, record in self.models.items()
            if name != record.version and record.kind == kind
        ]

    def versions_of(self, name: str) -> frozenset[str]:
        """Every version a worker serving ``name`` must hold: the alias's primary and any
        its split names (weights, pins, shadow); a version names itself."""
        record = self.models.get(name)
        named = {record.version} if record is not None else set()
        split = self.splits.get(name)
        if split is not None:
            named |= split.versions()
        return frozenset(named)
