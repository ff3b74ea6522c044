"""Typed settings, parsed once at start-up and passed down.

Precedence, highest first: command-line flags, environment (``HEADWAY_*``,
sections joined by ``__`` as in ``HEADWAY_GATEWAY__PORT=9000``), a config file
(``--config``: TOML, JSON or YAML by its suffix), then the defaults declared here;
``settings_sources.py`` reads and merges them. Every field's description is its
documentation, and docs/settings.md is generated from them (``settings_reference.py``).
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from headway.settings_sources import Resolved, resolve
from headway.settings_sources import SettingsError as SettingsError  # raised by load_settings

BackendName = Literal["onnx", "synthetic"]
PoolName = Literal["embed", "rerank"]
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsSettings(_Section):
    max_body_bytes: int = Field(
        1 << 20, gt=0, description="Largest request body accepted (413 above)."
    )
    max_texts: int = Field(2048, gt=0, description="Most texts (inputs or documents) per request.")
    max_chars: int = Field(
        20_000,
        gt=0,
        description="Most characters per text; the model truncates to its own token limit.",
    )


class TierTimeouts(_Section):
    default_ms: int = Field(gt=0, description="Deadline when X-Timeout-Ms is absent.")
    max_ms: int = Field(gt=0, description="Largest X-Timeout-Ms honoured.")


class AdmissionSettings(_Section):
    enabled: bool = Field(True, description="Admission control on; off only for comparisons.")
    latency_budget_ms: float = Field(
        500.0, gt=0, description="Time in system admitted work should take (Little's law W)."
    )
    mean_latency_share: float = Field(
        0.6,
        gt=0,
        le=1,
        description="Mean time in system aimed at, as a share of the budget, so the p95 fits it.",
    )
    batch_share: float = Field(
        0.7, gt=0, le=1, description="Share of the limit batch-tier work may fill."
    )
    crowding: float = Field(
        0.8, gt=0, le=1, description="Tier fill above which a tenant over its share is refused."
    )
    shadow_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Shadow copies run only while all outstanding work is below this share "
        "of the limit (none when the pool is at capacity).",
    )
    window_ms: float = Field(250.0, gt=0, description="Throughput measurement window.")
    floor_texts_per_replica: int = Field(
        32, gt=0, description="Smallest limit per ready replica (before anything is measured)."
    )
    static_limit_texts: int | None = Field(
        None, gt=0, description="A fixed limit instead of the learned one."
    )


class QuotaSettings(_Section):
    enabled: bool = Field(True, description="Charge each tenant's token bucket (texts).")
    gateways: int | None = Field(
        None,
        gt=0,
        description="Gateways sharing the quota, for the Redis-down fallback (default: learned).",
    )
    probe_interval_s: float = Field(
        1.0, gt=0, description="While Redis is down, how often a request tries it again."
    )
    heartbeat_s: float = Field(
        2.0, gt=0, description="How often a gateway announces itself in Redis (to count them)."
    )


class RoutingSettings(_Section):
    retries: bool = Field(True, description="Retry a failed chunk once on another replica.")
    retry_ratio: float = Field(
        0.2, ge=0, le=1, description="Retries and hedges allowed, as a share of recent chunks."
    )
    hedge_pools: tuple[PoolName, ...] = Field(
        (), description="Pools that hedge: a chunk not answered by the pool's p95 is sent again."
    )
    hedge_quantile: float = Field(
        0.95, ge=0.5, lt=1, description="The latency quantile after which a chunk is hedged."
    )


class CacheSettings(_Section):
    enabled: bool = Field(
        True, description="Serve repeated texts from the results cache (per model version)."
    )
    memory_bytes: int = Field(
        256 << 20,
        ge=0,
        description="The in-process tier's bound in bytes, all scopes together; past it the "
        "scope holding the most loses its least recently used entries.",
    )
    memory_scope_bytes: int = Field(
        64 << 20,
        ge=0,
        description="The in-process tier's bound for one scope (a tenant, or a shared group), "
        "LRU beyond it. Below memory_bytes, a few busy tenants never evict each other; with "
        "a single tenant, raise it to memory_bytes to use the whole tier.",
    )
    redis: bool = Field(
        True,
        description="With redis.cache_url set, also share entries in that Redis (the second "
        "tier); never in the quota instance.",
    )
    redis_ttl_s: int = Field(
        7 * 86400, gt=0, description="How long an entry lives in the Redis tier."
    )
    scope: Literal["tenant"] = Field(
        "tenant",
        description="tenant: each tenant reads only entries it (or its shared group) filled, "
        "so no tenant can tell from its latency what another sent. The former 'global' "
        "scope is refused: name the tenants that trust each other in shared_groups.",
    )
    shared_groups: dict[str, tuple[str, ...]] = Field(
        {},
        description="Named groups of tenants that share one cache scope, e.g. "
        '{"acme": ["acme-search", "acme-support"]}. Only for tenants that trust each other: '
        "each member can learn, from how fast a text is answered, whether another member "
        "sent it. A tenant is in at most one group; one created later under a listed name "
        "joins the group.",
    )
    disabled_tenants: tuple[str, ...] = Field(
        (), description="Tenants whose requests never read or fill the cache."
    )

    @field_validator("scope", mode="before")
    @classmethod
    def _no_global_scope(cls, value: object) -> object:
        if value == "global":
            raise ValueError(
                "the 'global' cache scope was removed: it let every tenant tell from its "
                "latency which texts any other tenant had sent. Keep scope = 'tenant' and "
                "list tenants that trust each other in gateway.cache.shared_groups"
            )
        return value

    @field_validator("shared_groups")
    @classmethod
    def _groups_are_disjoint(cls, groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        seen: dict[str, str] = {}
        for group, tenants in groups.items():
            if not _GROUP_NAME.fullmatch(group):
                raise ValueError(
                    f"shared group name {group!r}: letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit, at most 64"
                )
            if not tenants:
                raise ValueError(f"shared group {group!r} names no tenant")
            for tenant in tenants:
                if not tenant:
                    raise ValueError(f"shared group {group!r} names an empty tenant")
                if tenant in seen:
                    raise ValueError(
                        f"tenant {tenant!r} is in shared groups {seen[tenant]!r} and {group!r}: "
                        "a tenant shares one scope at most"
                    )
                seen[tenant] = group
        return groups


class EdgeLimits(_Section):
    """What one server process lets a connection hold (``http/guard.py``)."""

    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest a connection may take, from connecting or from a request's first "
        "byte, to send the request line and headers (with TLS, the handshake too); then it is "
        "closed (408 if it had begun).",
    )
    idle_timeout_s: float = Field(
        75.0,
        gt=0,
        description="Longest a kept-alive connection may sit idle between requests. Keep it "
        "above the gateway's 30 s client keep-alive, so the client closes first.",
    )
    max_header_bytes: int = Field(
        64 << 10,
        ge=1024,
        description="Largest request line plus headers, every byte counted however the "
        "reads split them; a request past it is answered 431 and its connection closed.",
    )
    max_connections: int = Field(
        10_000,
        gt=0,
        description="Open connections per process; a new one beyond it is answered 503 and "
        "closed at once. Keep it below the descriptor limit (ulimit -n).",
    )
    max_connections_per_client: int = Field(
        256,
        gt=0,
        description="Open connections per client address (an IPv6 client by its /64); beyond "
        "it a new one is answered 503 and closed. A trusted proxy's connections count only "
        "against max_connections.",
    )
    body_timeout_s: float = Field(
        20.0,
        gt=0,
        description="Longest a request body may take, from its headers, before it must "
        "arrive at body_min_rate_bytes_s: the body's deadline is this plus one second for every "
        "body_min_rate_bytes_s bytes received. Past it: 408 and the connection closed. Time "
        "the server itself stops reading (an app not ready for more) is not counted.",
    )
    body_min_rate_bytes_s: float = Field(
        500.0,
        gt=0,
        description="The slowest transfer rate of a request body that is waited for beyond "
        "body_timeout_s (Apache mod_reqtimeout's minrate).",
    )
    linger_s: float = Field(
        2.0,
        ge=0,
        description="After an answer sent before the request's body was all received (a "
        "401, 413 or 429 from the headers), how long the rest of the body is still read and "
        "dropped, so a client that sends its whole body before reading (most do) reads the "
        "answer instead of a reset (nginx's lingering close). 0: close at once.",
    )
    linger_bytes: int = Field(
        4 << 20,
        ge=0,
        description="The most bytes read and dropped in that time; a client with more of its "
        "body left gets a reset. Nothing is kept: a refused body costs reading it, not memory.",
    )
    trusted_proxies: tuple[str, ...] = Field(
        (),
        description="Proxies (CIDR list, e.g. 10.0.0.0/8) whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed: behind one, the client is the rightmost address in "
        "X-Forwarded-For that is not a trusted proxy. Empty: the peer is the client whatever "
        "the headers say.",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, cidrs: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr[:60]!r} is not an address or CIDR network") from exc
        return cidrs


class FailedAuthSettings(_Section):
    """The one limiter of failed key checks, for every route that takes a key or token
    (``gateway/auth/``): per client address and per key prefix, shared through Redis when
    redis_url is set. A client refused by it gets 429 with Retry-After, before its key is
    checked; a key already accepted from the same address is never refused by it."""

    address_failures: int = Field(
        20,
        ge=1,
        description="Failed key checks one client address (an IPv6 one by its /64) may make "
        "at once; then one more every address_window_s / address_failures seconds. Past it "
        "the address is refused (429) until one is allowed again.",
    )
    address_window_s: float = Field(
        300.0, gt=0, description="The window address_failures refill over."
    )
    key_prefix_failures: int = Field(
        10,
        ge=1,
        description="Failed key checks of keys that begin alike (the first key_prefix_chars "
        "characters), from any addresses, allowed at once; then one more every "
        "key_prefix_window_s / key_prefix_failures seconds: a guesser trying variants of one "
        "key from many addresses.",
    )
    key_prefix_window_s: float = Field(
        300.0, gt=0, description="The window key_prefix_failures refill over."
    )
    key_prefix_chars: int = Field(
        12,
        ge=4,
        description="How many leading characters of a presented key make its prefix (12: "
        "`hw_` and 9 random characters, 54 bits: knowing a victim's takes seeing its key).",
    )
    known_for_s: float = Field(
        86_400.0,
        gt=0,
        description="How long a key accepted from an address stays exempt there: while that "
        "address or that key's prefix is refused, the same key from the same address is "
        "still checked and served.",
    )
    tracked: int = Field(
        100_000,
        ge=100,
        description="Most addresses and prefixes with failures, and most (address, key) pairs "
        "known, each gateway keeps in memory (the least recently seen go first).",
    )
    probe_interval_s: float = Field(
        1.0,
        gt=0,
        description="With Redis away (limiting locally), how often one check tries Redis again.",
    )


class GatewaySettings(_Section):
    id: str = Field(
        "",
        pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]{0,252})?$",
        description="Names this gateway in usage events and its outbox file "
        "(empty: HOSTNAME-PORT). Keep it across restarts so a restarted gateway relays "
        "what its predecessor left (Kubernetes: the StatefulSet's pod name). Letters, "
        "digits, '.', '_' and '-': it is a file name.",
    )
    host: str = Field("127.0.0.1", description="Address the gateway listens on for clients.")
    port: int = Field(8080, ge=0, le=65535, description="Port the gateway listens on for clients.")
    ops_host: str = Field(
        "127.0.0.1",
        description="Address of the gateway's operations listener (/metrics, /healthz, "
        "/readyz; app/ops.py), for Prometheus and operators only: the client port does "
        "not serve /metrics, whose series name every tenant. Open it to Prometheus alone "
        "(docs/kubernetes.md).",
    )
    ops_port: int = Field(
        9200,
        ge=0,
        le=65535,
        description="Port of the operations listener (0: any free one, logged at start). "
        "`headway up` gives each gateway it starts a free port and prints it.",
    )
    embed_replicas: tuple[str, ...] = Field(
        (), description="Base URLs of the embed pool's workers, e.g. http://127.0.0.1:9101."
    )
    rerank_replicas: tuple[str, ...] = Field(
        (), description="Base URLs of the rerank pool's workers (empty: rerank uses embed)."
    )
    embed_dns: str | None = Field(
        None, description="NAME:PORT whose A records are the embed pool (a headless service)."
    )
    rerank_dns: str | None = Field(None, description="NAME:PORT for the rerank pool.")
    dns_server: str | None = Field(
        None, description="HOST:PORT of the DNS server to ask (default: the system's)."
    )
    dns_interval_s: float = Field(5.0, gt=0, description="How often DNS names are re-resolved.")
    chunk_texts: int = Field(16, gt=0, description="Requests above this many texts are split.")
    interactive: TierTimeouts = TierTimeouts(default_ms=10_000, max_ms=60_000)
    batch: TierTimeouts = TierTimeouts(default_ms=60_000, max_ms=300_000)
    health_interval_s: float = Field(0.5, gt=0, description="How often /readyz is polled.")
    cold_start_hold: bool = Field(
        True,
        description="A request whose pool is cold (no replica ready, none failing: scaled to "
        "zero, or its replicas still starting) waits for a replica to become ready, never past "
        "its deadline, instead of failing at once (see docs/scale-to-zero.md).",
    )
    cold_start_max_held_texts: int = Field(
        1024,
        gt=0,
        description="Most texts held at once per cold pool; a request beyond it is refused "
        "(503 overloaded, counted as shed with reason cold_start_full).",
    )
    cold_start_reserve_ms: float = Field(
        200.0,
        ge=0,
        description="Kept out of a held request's deadline for the work itself: one whose pool "
        "is still cold at its deadline minus this fails then (503 no_ready_replicas).",
    )
    cold_start_poll_s: float = Field(
        0.05,
        gt=0,
        description="While requests are held, how often the cold pool's /readyz is polled "
        "(instead of every health_interval_s), so they go on as soon as a replica is ready.",
    )
    wake_url: str | None = Field(
        None,
        pattern=r"^https?://[^/\s]+(/\S*)?$",
        description='POSTed {"pool": NAME} while requests are held for that cold pool (at '
        "most once a second per pool, off the request path): `headway up` sets it to its "
        "supervisor, which starts the pool's workers. None: no one is told (KEDA reads "
        "headway_pool_waiting_requests instead).",
    )
    drain_delay_s: float = Field(
        0.0,
        ge=0,
        description="After SIGTERM: /readyz 503 at once, keep serving this long, then close.",
    )
    outbox_flush_s: float = Field(
        10.0,
        ge=0,
        description="Shared mode, on stop: once the requests in flight have finished, relay "
        "the usage outbox to NATS for at most this long (a NATS away, or a stream that never "
        "acknowledges, holds the stop no longer); what is left stays in the outbox and is "
        "relayed by the gateway of the same id when it starts again. Keep drain_delay_s + "
        "30 s (the graceful shutdown) + this below the orchestrator's grace period "
        "(Kubernetes: terminationGracePeriodSeconds, docs/kubernetes.md).",
    )
    registry_refresh_s: float = Field(
        30.0, gt=0, description="How often the whole registry is reloaded even if unchanged."
    )
    registry_poll_s: float = Field(
        0.5,
        gt=0,
        description="How often the registry's change counter is read; a change reloads it "
        "(keys, tenants, splits reach every gateway within this plus a reload).",
    )
    rollout_tick_s: float = Field(
        1.0, gt=0, description="How often rollouts' counts are written and their steps judged."
    )
    routing: RoutingSettings = RoutingSettings()
    admission: AdmissionSettings = AdmissionSettings()
    quota: QuotaSettings = QuotaSettings()
    limits: LimitsSettings = LimitsSettings()
    cache: CacheSettings = CacheSettings()
    edge: EdgeLimits = EdgeLimits()
    ops_edge: EdgeLimits = Field(
        EdgeLimits(max_connections=256, max_connections_per_client=32, max_header_bytes=16 << 10),
        description="The operations listener's own timeouts and caps, apart from the client "
        "port's: its clients are a few scrapers and operators, so a client-port flood never "
        "takes the slots a scrape needs, nor the reverse.",
    )
    failed_auth: FailedAuthSettings = FailedAuthSettings()


class BillingSettings(_Section):
    host: str = Field("127.0.0.1", description="Address `headway run billing` serves /metrics on.")
    port: int = Field(9300, ge=0, le=65535, description="Port of `headway run billing`.")
    outbox_max_events: int = Field(
        1_000_000,
        gt=0,
        description="Bound of a gateway's usage outbox; full, the gateway answers 503 to "
        "billable work until the relay drains it.",
    )
    stream: str = Field("USAGE", description="JetStream stream of usage events.")
    subject: str = Field("usage.events", description="Subject usage events are published on.")
    consumer: str = Field("billing", description="Durable JetStream consumer of the ledger.")
    duplicate_window_s: float = Field(
        120.0, gt=0, description="JetStream de-duplication window by Nats-Msg-Id."
    )
    ack_wait_s: float = Field(
        30.0, gt=0, description="Redelivery after this long without an ack (consumer crashed)."
    )
    batch_events: int = Field(
        500, gt=0, le=10_000, description="Most events the consumer writes in one transaction."
    )
    fetch_wait_s: float = Field(
        0.2, gt=0, description="Longest the consumer waits for a batch to fill."
    )
    price_book: Path | None = Field(
        None, description="TOML price book (default: the packaged example prices)."
    )
    export_url: str | None = Field(
        None, description="Base URL of the metered-billing provider (Stripe meter events)."
    )
    export_api_key: str = Field("", description="Bearer key for the billing provider.")
    export_grace_s: float = Field(
        900.0, ge=0, description="An hour is exported this long after it ends (late events)."
    )
    ledger_retry_initial_s: float = Field(
        0.1,
        gt=0,
        description="First pause of the consumer when the ledger is unreachable (at start or "
        "mid-stream); doubled, with jitter, up to ledger_retry_max_s.",
    )
    ledger_retry_max_s: float = Field(
        30.0, gt=0, description="Longest pause between the consumer's tries of the ledger."
    )
    export_unmapped: Literal["refuse", "tenant_name"] = Field(
        "refuse",
        description="An export for a tenant with no billing customer id in the registry: "
        "refuse it (logged, left unsent, other tenants go on) or send it under the tenant's "
        "name as the customer id (the behaviour before the mapping).",
    )

    @model_validator(mode="after")
    def _ledger_retry_bounds(self) -> BillingSettings:
        if self.ledger_retry_initial_s > self.ledger_retry_max_s:
            raise ValueError("billing.ledger_retry_initial_s must not exceed ledger_retry_max_s")
        return self


class SyntheticSettings(_Section):
    call_ms: float = Field(50.0, ge=0, description="Synthetic backend: fixed cost of one batch.")
    text_ms: float = Field(5.0, ge=0, description="Synthetic backend: added cost per text.")
    dimensions: int = Field(384, gt=0, description="Synthetic backend: embedding width.")
    hiccup_share: float = Field(
        0.0, ge=0, le=1, description="Synthetic backend: share of calls that take longer."
    )
    hiccup_ms: float = Field(
        0.0, ge=0, description="Synthetic backend: how much longer (a pause, a noisy neighbour)."
    )
    seed: int = Field(
        0,
        ge=0,
        lt=1 << 32,
        description="Synthetic backend: mixed into every text's vector (another seed, "
        "another model); part of the version.",
    )
    fail_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Synthetic backend: share of model calls that fail (every chunk of "
        "that batch gets a 5xx), drawn from a seeded generator; part of the version.",
    )


class WorkerSettings(_Section):
    host: str = Field("127.0.0.1", description="Address the worker listens on.")
    port: int = Field(9100, ge=0, le=65535, description="Port the worker listens on.")
    pool: PoolName = Field("embed", description="Which pool this worker serves.")
    backend: BackendName = Field(
        "onnx", description="onnx (real model) or synthetic (cost = waiting)."
    )
    models: tuple[str, ...] = Field(
        (),
        description="Model aliases or versions served; each brings every version its "
        "split names. Empty: the pool's default alias.",
    )
    registry_poll_s: float = Field(
        1.0, gt=0, description="How often the registry's change counter is read."
    )
    memory_budget_mb: float | None = Field(
        None,
        gt=0,
        description="Most megabytes of model artifacts a worker keeps loaded: loading a "
        "version on demand beyond it unloads the least recently used idle ones loaded on "
        "demand (the pool's own aliases always stay). None: no limit.",
    )
    registry_retry_max_s: float = Field(
        5.0,
        gt=0,
        description="Longest pause between a starting worker's tries of the model registry "
        "while its database is unreachable (Postgres restarting): it waits, unready, and "
        "never exits for it; the first pause is 0.1 s (or this, if smaller), doubled with "
        "jitter.",
    )
    max_batch_size: int = Field(32, gt=0, description="Most texts in one model call.")
    max_background_batch_size: int = Field(
        2,
        gt=0,
        description="While interactive work is about (some came in the last second), the most "
        "batch-tier or shadow texts in one model call: how many an interactive chunk that "
        "arrives waits behind. Larger background chunks run in pieces.",
    )
    max_batch_tokens: int = Field(
        8192, gt=0, description="Most padded tokens (texts x longest) in one model call."
    )
    max_wait_ms: float = Field(2.0, ge=0, description="Longest a batch waits to fill.")
    batch_wait: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="adaptive: an idle model waits for a batch to fill only as long as the "
        "arrival rate and the model's per-call cost say it pays (at most max_wait_ms); "
        "fixed: it always waits up to max_wait_ms for a batch that is not full.",
    )
    max_queue_texts: int = Field(1024, gt=0, description="Queue bound in texts; full answers 503.")
    inference_threads: int = Field(1, gt=0, description="ONNX Runtime intra-op threads per worker.")
    mapped_weights: bool = Field(
        True,
        description="Run each model from its prepared copy (`<data_dir>/models/.prepared/`), "
        "whose weights, pre-packed ones included, are memory-mapped: workers holding one "
        "version share one copy in the page cache. Off: each worker copies them onto its heap.",
    )
    drain_delay_s: float = Field(
        1.5,
        ge=0,
        description="After SIGTERM: unready at once, keep serving this long, then close.",
    )
    tokenizer_threads: int = Field(
        1, gt=0, description="Threads of the tokenizer's pool (it defaults to every core)."
    )
    synthetic: SyntheticSettings = SyntheticSettings()
    edge: EdgeLimits = Field(
        EdgeLimits(max_connections_per_client=10_000),
        description="A worker's clients are a few gateways, each with a connection per chunk "
        "in flight: its per-client cap defaults to the process cap.",
    )


class UpSettings(_Section):
    embed_replicas: int = Field(1, ge=1, description="Embed workers started by `headway up`.")
    gateways: int = Field(
        1, ge=1, description="Gateways started by `headway up` (ports port, port+1, ...)."
    )
    rerank_replicas: int = Field(
        1,
        ge=0,
        description="Rerank workers (0: rerank on the embed pool). They start with `up` when "
        "the registry holds a cross-encoder; without one, on the first request for one "
        "(rerank is scored by cosine on the embed pool meanwhile).",
    )
    ready_timeout_s: float = Field(120.0, gt=0, description="How long `up` waits for workers.")
    prewarm: bool = Field(
        True,
        description="Start each pool's workers at start-up and wait for them (off: a pool's "
        "first request starts them, and waits for its first replica; see "
        "docs/scale-to-zero.md).",
    )
    idle_stop_s: float | None = Field(
        None,
        gt=0,
        description="Stop a pool's workers (SIGTERM, drained) after this long without traffic "
        "to them; its next request starts them again. None: never stop them.",
    )


class ExecutorSettings(_Section):
    gateway_urls: tuple[str, ...] = Field(
        ("http://127.0.0.1:8080",),
        description="Gateways the executor submits lines to (as batch-tier work), in turn.",
    )
    lines_in_flight: int = Field(32, gt=0, description="Lines one executor runs at once.")
    max_lines_in_flight_per_tenant: int = Field(
        16,
        gt=0,
        description="Most of one tenant's lines one executor runs at once (of "
        "lines_in_flight): the rest of its slots stay free for other tenants' lines, which the "
        "work queue hands out round robin by tenant.",
    )
    poll_s: float = Field(0.5, gt=0, description="How often batches are checked for a move.")
    lease_s: float = Field(
        60.0, gt=0, description="A pulled line not finished in this long goes to another."
    )
    max_attempts: int = Field(
        5, gt=0, description="Tries of a line that fails on our side before it is an error."
    )
    line_timeout_ms: int = Field(
        120_000, gt=0, description="Deadline of one line's request (X-Timeout-Ms)."
    )
    dependency_retry_initial_s: float = Field(
        0.1,
        gt=0,
        description="First pause of the executor when its batch store or work queue is "
        "unreachable (at start or mid-run: Postgres or NATS away); doubled, with jitter, up to "
        "dependency_retry_max_s. It waits, never exits; /readyz is 503 meanwhile.",
    )
    dependency_retry_max_s: float = Field(
        10.0,
        gt=0,
        description="Longest pause between the executor's tries of an unreachable store or queue.",
    )

    @model_validator(mode="after")
    def _dependency_retry_bounds(self) -> ExecutorSettings:
        if self.dependency_retry_initial_s > self.dependency_retry_max_s:
            raise ValueError(
                "batches.executor.dependency_retry_initial_s must not exceed dependency_retry_max_s"
            )
        return self


class BatchSettings(_Section):
    files_dir: Path | None = Field(
        None, description="The content-addressed file store (default: <data_dir>/files)."
    )
    max_file_bytes: int = Field(200 << 20, gt=0, description="Largest file upload (bytes).")
    max_lines: int = Field(50_000, gt=0, description="Most lines in a batch's input file.")
    max_inputs: int = Field(
        50_000, gt=0, description="Most inputs over every line of one embeddings batch."
    )
    file_retention_s: int = Field(
        30 * 86400,
        gt=0,
        description="Files (inputs and outputs) are deleted this long after upload.",
    )
    max_files_per_tenant: int = Field(
        10_000,
        ge=0,
        description="Most files (inputs and the outputs its batches wrote) one tenant keeps; "
        "an upload past it is refused (400 storage_limit_reached) until files are deleted or "
        "expire. A tenant's own rule (`headway tenants set --max-files`) overrides it.",
    )
    max_stored_bytes_per_tenant: int = Field(
        10 << 30,
        ge=0,
        description="Most bytes of files one tenant keeps (outputs included); an upload that "
        "would pass it is refused (400 storage_limit_reached) at the first byte past it. A "
        "tenant's rule (`--max-stored-bytes`) overrides it.",
    )
    max_open_batches_per_tenant: int = Field(
        100,
        ge=0,
        description="Most batches of one tenant not yet finished (validating, in progress, "
        "finalizing, cancelling); creating another is refused (429 limit_reached, with "
        "Retry-After). A tenant's rule (`--max-open-batches`) overrides it.",
    )
    max_uploads_per_tenant: int = Field(
        4,
        gt=0,
        description="Uploads one tenant may have in progress at once on one gateway; another "
        "is refused (429 limit_reached, with Retry-After) before its body is read.",
    )
    max_uploads: int = Field(
        16,
        gt=0,
        description="Uploads in progress at once on one gateway, all tenants together (each "
        "holds a temporary file in the file store's directory while it streams).",
    )
    executor_token: str = Field(
        "",
        description="Shared secret the executor presents to the gateways' internal batch "
        "routes; empty: those routes refuse everything (`headway up` makes one).",
    )
    stream: str = Field("BATCH_WORK", description="JetStream work-queue stream (shared mode).")
    subject: str = Field("batches.work", description="Subject prefix of the work items.")
    consumer: str = Field("executors", description="Durable consumer the executors share.")
    executor: ExecutorSettings = ExecutorSettings()


class _StreamLimits(_Section):
    """A JetStream stream's limits, applied when start-up creates it and compared with
    it on every start after (a difference refuses the start unless ``streams.update``)."""

    max_age_s: float = Field(gt=0, description="Messages older than this are removed.")
    max_bytes: int = Field(
        gt=0,
        description="Most bytes the stream holds; reserved in NATS's store at creation, so "
        "every stream's max_bytes together must fit the servers' max_file_store.",
    )
    max_msg_size: int = Field(
        64 << 10, gt=0, description="A bigger message is refused (ours are under 2 KiB)."
    )
    discard: Literal["new", "old"] = Field(
        "new",
        description="Full: refuse the publish (new), or drop the oldest messages (old: "
        "loses unbilled events or queued lines; only for a stream whose contents may go).",
    )
    replicas: int = Field(
        1, ge=1, le=5, description="Servers holding each message (3 in a 3-node cluster)."
    )
    storage: Literal["file", "memory"] = Field(
        "file",
        description="Where the stream lives; memory loses what NATS acknowledged on a "
        "restart, and is refused unless streams.allow_volatile.",
    )


class UsageStreamSettings(_StreamLimits):
    max_age_s: float = Field(
        72 * 3600.0,
        gt=0,
        description="Usage events are kept this long (billed or not: LIMITS retention), so "
        "this is the longest the billing consumer may be away before events expire "
        "unbilled: a weekend (64 h) with room to spare.",
    )
    max_bytes: int = Field(
        24 << 30,
        gt=0,
        description="Most bytes of usage events: it must hold max_age_s of events at peak "
        "(about 620 B each: 100 req/s for 72 h is 16 GB); full, publishes are refused and "
        "the gateways' outboxes hold the events until they fill (then 503).",
    )


class WorkStreamSettings(_StreamLimits):
    max_age_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="A queued batch line is dropped this long after it was put: far beyond "
        "any batch's completion window, so age never takes a line that could still run.",
    )
    max_bytes: int = Field(
        4 << 30,
        gt=0,
        description="Most bytes of queued lines (about 290 B each: 15 million lines); full, "
        "creating a batch fails (503) and nothing queued is dropped.",
    )


class StreamsSettings(_Section):
    """The JetStream streams of shared mode: USAGE (metering) and BATCH_WORK (batches)."""

    usage: UsageStreamSettings = UsageStreamSettings()
    batch_work: WorkStreamSettings = WorkStreamSettings()
    update: bool = Field(
        False,
        description="A stream found with other limits than these is changed to them (each "
        "difference logged); false: start-up refuses it and names the difference.",
    )
    allow_volatile: bool = Field(
        False,
        description="Accept a stream in memory, or NATS servers that do not fsync every "
        "write (`sync_interval: always`), or whose fsync setting cannot be read; a dev "
        "setting: an event NATS acknowledged may then be lost.",
    )
    monitor_urls: str | None = Field(
        None,
        description="NATS monitoring endpoints (http://host:8222, comma-separated), read at "
        "start-up for each server's fsync setting (/varz); default: port 8222 of each "
        "nats_url host. In a cluster, list every server.",
    )

    @property
    def monitor_url_list(self) -> tuple[str, ...]:
        return tuple(url.strip() for url in (self.monitor_urls or "").split(",") if url.strip())


class TracingSettings(_Section):
    otlp_endpoint: str | None = Field(
        None,
        description="Export spans over OTLP/HTTP to this collector URL (http://host:4318/v1/"
        "traces); None: tracing is off, and an incoming traceparent is only passed on.",
    )
    sample_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of new traces recorded (a sampled parent is always followed).",
    )
    service_namespace: str = Field("headway", description="service.namespace of every span.")


class LoggingSettings(_Section):
    format: Literal["text", "json"] = Field(
        "text", description="text for people, json (one object a line) for log pipelines."
    )
    access: bool = Field(
        False,
        description="One log line per answered request: route, status, outcome, tenant, "
        "request id, trace id, seconds (never a text).",
    )


class MetricsSettings(_Section):
    max_tenant_labels: int = Field(
        50,
        ge=1,
        description="Tenants given their own label value; the rest are counted as 'other'.",
    )


class QualitySettings(_Section):
    enabled: bool = Field(True, description="Watch each version's outputs for drift.")
    reference_size: int = Field(
        256, ge=16, description="Outputs kept as a version's reference when it goes live."
    )
    window_size: int = Field(256, ge=16, description="Recent outputs compared with it.")
    sample_share: float = Field(
        0.01,
        gt=0,
        le=1,
        description="Share of served rows sampled (a reference of 256 fills after ~25,600).",
    )
    interval_s: float = Field(30.0, gt=0, description="How often drift is computed.")
    permutations: int = Field(200, ge=20, description="Permutations of the MMD p-value.")
    p_value_threshold: float = Field(
        0.01, gt=0, lt=1, description="Drift is flagged when the p-value is below this."
    )


class ConsoleSettings(_Section):
    enabled: bool = Field(True, description="Serve the operator console at /console.")
    session_secret: str = Field(
        "",
        description="Signs console sessions; every gateway behind one name needs the same. "
        "Empty: a random one per process (sessions end when it restarts).",
    )
    session_ttl_s: int = Field(8 * 3600, gt=0, description="How long a console session lasts.")
    machine_cost_per_hour: float = Field(
        0.0, ge=0, description="What one machine of the pools costs an hour (unit economics)."
    )
    currency: str = Field("USD", description="Currency of machine_cost_per_hour.")


class ObservabilitySettings(_Section):
    tracing: TracingSettings = TracingSettings()
    logging: LoggingSettings = LoggingSettings()
    metrics: MetricsSettings = MetricsSettings()
    quality: QualitySettings = QualitySettings()
    console: ConsoleSettings = ConsoleSettings()


class WeightsSettings(_Section):
    """Where a worker gets a model version it lacks, and which signatures it accepts."""

    url: str | None = Field(
        None,
        description="Base URL of the host serving its model store (a gateway: "
        "https://gateway:8080); a worker without a version locally fetches it from there "
        "(GET /v1/weights/...). None: never fetch.",
    )
    token: str = Field(
        "",
        description="The worker credential: what a worker presents to url, and what a gateway "
        "accepts on its /v1/weights routes besides an admin key (empty: admin keys only).",
    )
    trusted_keys: tuple[str, ...] = Field(
        (),
        description="ed25519 public keys (base64 of the raw 32 bytes, as `headway models "
        "keygen` prints them); at load a signed artifact must verify against one. Empty: "
        "signatures are not checked.",
    )
    require_signature: bool = Field(
        False, description="Refuse to load an artifact without a signature (needs trusted_keys)."
    )
    timeout_s: float = Field(
        30.0, gt=0, description="Longest a fetch waits on one read from url before it gives up."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url.rstrip("/") if url else url

    @field_validator("trusted_keys")
    @classmethod
    def _raw_ed25519_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        for key in keys:
            try:
                raw = base64.b64decode(key, validate=True)
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise ValueError(f"{key[:60]!r} is not base64 of a raw 32-byte ed25519 key")
        return keys

    @model_validator(mode="after")
    def _keys_for_required_signatures(self) -> WeightsSettings:
        if self.require_signature and not self.trusted_keys:
            raise ValueError("require_signature needs trusted_keys to check signatures against")
        return self


class RedisInstanceSettings(_Section):
    """How to sign in to one Redis instance: an ACL user (or ``requirepass`` alone) and TLS,
    which needs a ``rediss://`` URL. The password never appears in a log line or a repr."""

    username: str | None = Field(
        None, description="ACL user (Redis 6+); without it, the password is requirepass's."
    )
    password: str | None = Field(
        None,
        repr=False,
        description="Password of the user (or requirepass); keep it out of the URL, which "
        "may be shown.",
    )
    tls_ca: Path | None = Field(
        None, description="CA file the server's certificate must chain to (rediss:// only)."
    )
    tls_cert: Path | None = Field(
        None, description="Client certificate (PEM) for a server that asks for one."
    )
    tls_key: Path | None = Field(None, description="The private key of tls_cert.")

    @model_validator(mode="after")
    def _existing_files_in_pairs(self) -> RedisInstanceSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: set both or neither")
        for name in ("tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: {path} is not a file")
        return self

    @property
    def tls_files(self) -> bool:
        return self.tls_ca is not None or self.tls_cert is not None


class RedisSettings(_Section):
    """Quota buckets and cache entries in two Redis instances (docs/redis.md). Eviction is
    a setting of the whole instance, so a database number apart is not enough: under
    ``allkeys-lru`` cache pressure evicts buckets (a forgotten bucket is a full one), under
    ``noeviction`` a full cache refuses bucket writes. ``redis_url`` is the quota instance
    (``noeviction``), ``cache_url`` the cache's (``allkeys-lru``); with only ``redis_url``
    set the cache keeps to each gateway's memory."""

    quota: RedisInstanceSettings = RedisInstanceSettings()
    cache_url: str | None = Field(
        None,
        description="The results cache's Redis (redis:// or rediss://host:port/db), another "
        "instance than redis_url's, with an evicting maxmemory-policy (allkeys-lru).",
    )
    cache: RedisInstanceSettings = RedisInstanceSettings()
    require_noeviction: bool = Field(
        True,
        description="A gateway refuses to start on a quota Redis whose maxmemory-policy is "
        "not noeviction, or that is the cache's instance (and limits locally if it finds "
        "that later). Off only where neither CONFIG GET nor INFO can be read.",
    )


class TlsSettings(_Section):
    """HTTPS to clients, and mutual TLS between the gateway and its workers (docs/tls.md);
    every file is re-read when it changes, without a restart."""

    public_cert: Path | None = Field(
        None, description="The gateway serves HTTPS to clients with this certificate (PEM)."
    )
    public_key: Path | None = Field(None, description="The private key of public_cert.")
    ca: Path | None = Field(
        None,
        description="The internal CA (`headway certs init`). With cert and key: workers serve "
        "HTTPS and refuse a caller without a certificate it signed; the gateway calls workers "
        "over https:// and checks their certificate against it (name worker.headway.internal).",
    )
    cert: Path | None = Field(
        None, description="This process's own certificate for internal hops (its role's)."
    )
    key: Path | None = Field(None, description="The private key of cert.")
    reload_interval_s: float = Field(
        5.0, gt=0, description="How often certificate files are checked for a change."
    )
    worker_callers: tuple[str, ...] = Field(
        ("gateway.headway.internal", "executor.headway.internal"),
        min_length=1,
        description="With internal TLS: the identities (a DNS name in the certificate) a "
        "worker accepts; a certificate of the CA naming none of them is refused as its "
        "handshake ends (`headway up` adds its own certificate's).",
    )
    worker_loopback_callers: tuple[str, ...] = Field(
        ("worker.headway.internal",),
        description="Identities a worker accepts besides, from a loopback address only: its "
        "pod's own probes, which present the worker's certificate (prod overlay).",
    )
    line_callers: tuple[str, ...] = Field(
        ("executor.headway.internal",),
        min_length=1,
        description="With internal TLS and HTTPS to clients: the identities the gateway's "
        "batch line routes accept, besides the executor's token (a client certificate the "
        "gateway asks for, optionally, on its client port).",
    )

    @model_validator(mode="after")
    def _whole_pairs_of_existing_files(self) -> TlsSettings:
        if (self.public_cert is None) != (self.public_key is None):
            raise ValueError("tls.public_cert and tls.public_key go together: set both or neither")
        internal = {"ca": self.ca, "cert": self.cert, "key": self.key}
        if None in internal.values() and any(internal.values()):
            missing = ", ".join(f"tls.{name}" for name, path in internal.items() if path is None)
            raise ValueError(f"tls.ca, tls.cert and tls.key go together: {missing} not set")
        files = {"public_cert": self.public_cert, "public_key": self.public_key, **internal}
        for name, path in files.items():
            if path is not None and not path.is_file():
                raise ValueError(f"tls.{name}: {path} is not a file")
        return self

    @property
    def public(self) -> bool:
        """The gateway serves HTTPS to its clients."""
        return self.public_cert is not None

    @property
    def internal(self) -> bool:
        """Workers serve mutual TLS and the gateway calls them over https://."""
        return self.ca is not None


class PostgresRolesSettings(_Section):
    """One Postgres role per component in shared mode (docs/security.md): each process's
    ``postgres_url`` names its own role; ``headway db roles``, run with the owner's URL,
    makes them with only the grants each needs (``privileges.py``)."""

    prefix: str = Field(
        "headway",
        pattern=r"^[a-z][a-z0-9_]{0,40}$",
        description="Roles are <prefix>_gateway, _worker, _billing, _executor; roles are "
        "the Postgres cluster's, so two stacks on one cluster need two prefixes.",
    )
    up: bool = Field(
        True,
        description="`headway up` with postgres_url (the owner's) makes the roles with fresh "
        "passwords and starts each process on its own; off: every process uses postgres_url.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(Path(".headway"), description="Registry, model store and run files.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="The least severe log records written."
    )
    redis_url: str | None = Field(
        None,
        description="Shared mode: quotas (and failed key checks) in Redis "
        "(redis:// or rediss://host:port/db), one for all gateways; an instance with "
        "maxmemory-policy noeviction (redis.*, docs/redis.md).",
    )
    nats_url: str | None = Field(
        None,
        description="Shared mode: usage events on NATS JetStream (nats://host:port), relayed "
        "from each gateway's outbox; without it the billing consumer reads the outboxes.",
    )
    postgres_url: str | None = Field(
        None,
        description="Shared mode: the registry (tenants, keys, models, splits, rollouts, audit "
        "log) and the usage ledger on Postgres (postgresql://user@host:port/db); without it, "
        "SQLite files in the data dir.",
    )
    embed_model: str = Field(
        "all-MiniLM-L6-v2", description="Default model alias of the embed pool."
    )
    rerank_model: str = Field("rerank", description="Alias of the rerank pool's model.")
    gateway: GatewaySettings = GatewaySettings()
    worker: WorkerSettings = WorkerSettings()
    up: UpSettings = UpSettings()
    billing: BillingSettings = BillingSettings()
    batches: BatchSettings = BatchSettings()
    streams: StreamsSettings = StreamsSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    tls: TlsSettings = TlsSettings()
    weights: WeightsSettings = WeightsSettings()
    test_faults: frozenset[Literal["drop_outbox_row", "ack_before_commit", "duplicate_line"]] = (
        Field(
            frozenset(),
            description="TESTS ONLY: planted bugs the chaos checker must catch "
            "(headway/plants.py): a gateway drops one usage event in 20 from its outbox, the "
            "billing consumer acks before it commits, the executor writes one output line "
            "twice. Refused unless test_faults_allowed is also set; never set it in a "
            "deployment.",
        )
    )
    test_faults_allowed: bool = Field(
        False, description="TESTS ONLY: the second key test_faults needs (the harness sets both)."
    )

    @model_validator(mode="after")
    def _test_fault_only_in_tests(self) -> Settings:
        if self.test_faults and not self.test_faults_allowed:
            raise ValueError(
                f"test_faults={sorted(self.test_faults)} plant bugs on purpose and are for the "
                "chaos checker's tests only: refused without test_faults_allowed (unset "
                "HEADWAY_TEST_FAULTS in anything that serves tenants)"
            )
        return self

    redis: RedisSettings = RedisSettings()
    postgres_roles: PostgresRolesSettings = PostgresRolesSettings()

    @model_validator(mode="after")
    def _across_sources(self) -> Settings:
        """Checks whose fields may come from different sources (a URL in the file, its
        password in the environment): every source is merged before any check runs."""
        check_redis_url("redis_url", self.redis_url, self.redis.quota)
        check_redis_url("redis.cache_url", self.redis.cache_url, self.redis.cache)
        if self.redis.cache_url and not self.redis_url:
            raise ValueError("redis.cache_url needs redis_url (the quota instance) too")
        quota_url, cache_url = self.redis_url, self.redis.cache_url
        if quota_url and cache_url and redis_server_of(quota_url) == redis_server_of(cache_url):
            raise ValueError(
                "redis.cache_url names the quota instance (redis_url): eviction is per "
                "instance, so the cache needs a Redis server of its own (docs/redis.md)"
            )
        return self

    @property
    def registry_path(self) -> Path:
        return self.data_dir / "registry.sqlite3"

    @property
    def model_root(self) -> Path:
        return self.data_dir / "models"

    @property
    def outbox_dir(self) -> Path:
        """One usage outbox per gateway id: ``<id>.sqlite3``."""
        return self.data_dir / "outbox"

    @property
    def files_dir(self) -> Path:
        return self.batches.files_dir or self.data_dir / "files"

    @property
    def batches_path(self) -> Path:
        """The embedded batch store and work queue (when no postgres_url / nats_url)."""
        return self.data_dir / "batches.sqlite3"

    @property
    def ledger_path(self) -> Path:
        """The embedded ledger (when no ``postgres_url`` is set)."""
        return self.data_dir / "ledger.sqlite3"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the arguments: the environment is read once, by ``load_settings``
        (``settings_sources.py``), which remembers where each value came from."""
        return (init_settings,)


def redis_server_of(url: str) -> tuple[str, int | str]:
    """The server a Redis URL names (host and port, or a socket path), not its database."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return ("unix", parts.path)
    return ((parts.hostname or "localhost").lower(), parts.port or 6379)


def check_redis_url(name: str, url: str | None, instance: RedisInstanceSettings) -> None:
    """A URL redis-py can open, with TLS files only for rediss:// and one password source."""
    if url is None:
        if instance.username or instance.password or instance.tls_files:
            raise ValueError(f"credentials or TLS files are set for {name}, which is not set")
        return
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"{name}: the scheme must be redis://, rediss:// or unix://")
    if instance.tls_files and parts.scheme != "rediss":
        raise ValueError(f"{name}: TLS files are set but the URL is not rediss://")
    if parts.password is not None and instance.password is not None:
        raise ValueError(f"{name}: a password in the URL and in the settings; keep one")


def resolve_settings(
    *,
    config_file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[tuple[str, ...], str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Resolved[Settings]:
    """Defaults < config file < environment (``environ``, default ``os.environ``) < flags,
    with where each value came from; ``SettingsError`` names each problem's source.

    ``flags`` is a nested mapping holding only the flags the user gave; ``flag_names``
    the flag each was typed as (``--embed-replicas`` for ``("up", "embed_replicas")``).
    """
    resolved = resolve(
        Settings,
        config_file=config_file,
        environ=os.environ if environ is None else environ,
        flags=flags,
        flag_names=flag_names,
    )
    settings = resolved.value
    absolute = settings.model_copy(update={"data_dir": settings.data_dir.expanduser().absolute()})
    return Resolved(absolute, resolved.sources)


def load_settings(
    *,
    config_file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[tuple[str, ...], str] | None = None,
) -> Settings:
    """The settings of flags > environment > ``config_file`` > defaults."""
    return resolve_settings(config_file=config_file, flags=flags, flag_names=flag_names).value
