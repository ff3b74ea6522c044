"""What start-up checks before it uses a JetStream stream: that a PubAck means what the
exactly-once argument needs, and that the stream is the one the settings describe.

**Durability.** A PubAck lets the relay delete an event from its outbox (and the executor
forget a put), so it must mean "on disk": ``storage`` is ``file`` and every server runs with
``sync_interval: always`` (otherwise an acknowledged event lives in the page cache for up to
two minutes, and a power loss takes it). NATS does not tell clients its fsync setting, so
each server's ``/varz`` (``jetstream.config.sync_always``) is read. Servers that do not
answer are logged and skipped while one does (they share one configuration; a restart must
not keep the gateways down); none answering, or one without ``sync_always``, is a
``StreamDurabilityError``, unless ``allow_volatile`` says losses are acceptable (dev).

**Limits, never silently overwritten.** A missing stream is created from the settings. An
existing one that differs on a field the settings own is logged and refused
(``StreamConfigError``, naming the setting and both values) unless ``update_existing``, which
changes only those fields and keeps whatever else an operator set. Storage and retention
never change on a live stream: those are refused either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
from nats.js import JetStreamContext, api
from nats.js.errors import APIError

log = logging.getLogger(__name__)

STREAM_NAME_IN_USE = 10058
"""JetStream's err_code: a stream of this name exists with another configuration."""
INSUFFICIENT_STORAGE = 10047
"""JetStream's err_code: the servers cannot reserve the stream's ``max_bytes``."""
REPLICAS_NOT_CLUSTERED = 10074
"""JetStream's err_code: more than one replica asked of a server that is no cluster."""
INVALID_CONFIG = 10052
"""JetStream's err_code: the configuration is invalid (or that change is not allowed)."""
MONITOR_PORT = 8222
"""nats-server's conventional monitoring port, where ``/varz`` is read by default."""

_UNLIMITED: dict[str, object] = {"max_age": 0.0, "max_bytes": -1, "max_msg_size": -1}


class StreamConfigError(RuntimeError):
    """The stream exists with another configuration than the settings', and is left as is."""


class StreamDurabilityError(RuntimeError):
    """The stream's storage or its servers' fsync setting cannot keep a PubAck's promise."""


@dataclass(frozen=True, slots=True)
class Difference:
    """One field on which the stream found differs from the one the settings describe."""

    field: str
    """The field of ``api.StreamConfig``."""
    setting: str
    """The setting that owns it, as the operator writes it (``streams.usage.max_bytes``);
    empty: no setting, this version of headway needs ``wanted``."""
    found: object
    wanted: object
    mutable: bool
    """JetStream can change it on a live stream."""


@dataclass(frozen=True, slots=True)
class Owned:
    """Which setting owns each field ``differences`` compares, for one stream."""

    limits: str
    """The settings section of the stream's limits: ``streams.usage``."""
    name: str
    """The setting of the stream's name: ``billing.stream``."""
    subject: str
    duplicate_window: str


def differences(
    found: api.StreamConfig, wanted: api.StreamConfig, owned: Owned
) -> list[Difference]:
    """The owned fields on which ``found`` differs from ``wanted``, in a stable order."""
    fields = (
        ("subjects", owned.subject, True),
        ("retention", "", False),
        ("storage", f"{owned.limits}.storage", False),
        ("num_replicas", f"{owned.limits}.replicas", True),
        ("max_age", f"{owned.limits}.max_age_s", True),
        ("max_bytes", f"{owned.limits}.max_bytes", True),
        ("max_msg_size", f"{owned.limits}.max_msg_size", True),
        ("discard", f"{owned.limits}.discard", True),
        ("duplicate_window", owned.duplicate_window, True),
    )
    found_values = [_normal(name, getattr(found, name)) for name, _, _ in fields]
    wanted_values = [_normal(name, getattr(wanted, name)) for name, _, _ in fields]
    return [
        Difference(name, setting, had, want, mutable)
        for (name, setting, mutable), had, want in zip(
            fields, found_values, wanted_values, strict=True
        )
        if had != want
    ]


def _normal(field: str, value: object) -> object:
    """A field's value as compared and shown: enums by name, seconds rounded to the
    millisecond (JetStream keeps nanoseconds), absent as JetStream's own default."""
    if value is None:
        value = _UNLIMITED.get(field, 1 if field == "num_replicas" else value)
    if isinstance(value, float):
        return round(value, 3)
    return getattr(value, "value", value)


def env_name(setting: str) -> str:
    """``streams.usage.max_bytes`` → ``HEADWAY_STREAMS__USAGE__MAX_BYTES``."""
    return "HEADWAY_" + setting.upper().replace(".", "__")


def refusal(stream: str, diffs: Sequence[Difference], owned: Owned) -> str:
    """The message of a ``StreamConfigError``, one line: each difference, then what to do."""
    parts = []
    for diff in diffs:
        source = (
            f"{diff.setting} ({env_name(diff.setting)}) says" if diff.setting else "headway needs"
        )
        fixed = "" if diff.mutable else " (cannot change on an existing stream)"
        parts.append(f"{diff.field}: the stream has {diff.found}, {source} {diff.wanted}{fixed}")
    if all(diff.mutable for diff in diffs):
        advice = (
            "set those settings to the stream's values, or let start-up change the stream: "
            "HEADWAY_STREAMS__UPDATE=true (--update-streams)"
        )
    else:
        advice = (
            f"delete the stream (`nats stream rm {stream}`, losing what it holds) or set "
            f"{env_name(owned.name)} to another name"
        )
    return (
        f"the JetStream stream {stream!r} exists with another configuration than the "
        f"settings, and was left as it is: {'; '.join(parts)}. To go on, {advice}."
    )


async def reconcile(
    js: JetStreamContext, wanted: api.StreamConfig, owned: Owned, *, update_existing: bool
) -> api.StreamInfo:
    """Create the stream, or check the one there (see the module docstring)."""
    assert wanted.name is not None
    try:
        return await js.add_stream(wanted)  # the same configuration again: accepted as is
    except APIError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            _raise_refused(exc, wanted, owned)
            raise
    found = await js.stream_info(wanted.name)
    diffs = differences(found.config, wanted, owned)
    if not diffs:  # it differs only on fields the settings do not own: those stay
        return found
    for diff in diffs:
        log.warning(
            "stream %s: %s is %s, %s %s",
            wanted.name,
            diff.field,
            diff.found,
            f"{diff.setting} says" if diff.setting else "headway needs",
            diff.wanted,
        )
    if not update_existing or not all(diff.mutable for diff in diffs):
        raise StreamConfigError(refusal(wanted.name, diffs, owned))
    changed = dataclasses.replace(
        found.config, **{diff.field: getattr(wanted, diff.field) for diff in diffs}
    )
    try:
        info = await js.update_stream(changed)
    except APIError as exc:
        _raise_refused(exc, wanted, owned)
        raise
    log.warning(
        "stream %s updated to the settings (streams.update): %s",
        wanted.name,
        ", ".join(diff.field for diff in diffs),
    )
    return info


def _raise_refused(exc: APIError, wanted: api.StreamConfig, owned: Owned) -> None:
    """JetStream's refusal of the settings themselves, which no retry mends, raised as a
    ``StreamConfigError``; the rest (the servers away, no quorum yet) is left to raise."""
    refused = _refused(exc, wanted, owned)
    if refused is not None:
        raise refused from exc


def _refused(exc: APIError, wanted: api.StreamConfig, owned: Owned) -> StreamConfigError | None:
    if exc.err_code == INSUFFICIENT_STORAGE:
        setting = f"{owned.limits}.max_bytes"
        return StreamConfigError(
            f"JetStream has no room for stream {wanted.name!r}: {setting} "
            f"({env_name(setting)}) is {wanted.max_bytes} bytes, more than the servers' "
            "max_file_store leaves (every stream's max_bytes is reserved): lower it, or "
            "give NATS a bigger store"
        )
    if exc.err_code == REPLICAS_NOT_CLUSTERED:
        setting = f"{owned.limits}.replicas"
        return StreamConfigError(
            f"stream {wanted.name!r}: {setting} ({env_name(setting)}) is "
            f"{wanted.num_replicas}, but the NATS server is no cluster: set it to 1"
        )
    if exc.err_code == INVALID_CONFIG:
        return StreamConfigError(
            f"JetStream refused the configuration of stream {wanted.name!r} "
            f"(settings {owned.limits}.*): {exc.description}"
        )
    return None


@dataclass(frozen=True, slots=True)
class ServerSync:
    """One server's answer about its fsync setting."""

    url: str
    """Its monitoring endpoint."""
    sync_always: bool | None
    """``sync_interval: always``; None: the endpoint could not be read."""
    detail: str = ""
    """The server's name, or why it could not be read."""


class SyncProbe(Protocol):
    """Reads each NATS server's fsync setting."""

    async def servers(self) -> Sequence[ServerSync]: ...


class OnceProbe:
    """A ``SyncProbe`` that asks again only until some server has answered: the check is
    one of start-up, and a set-up done again while NATS restarts must not fail on it."""

    def __init__(self, probe: SyncProbe) -> None:
        self._probe = probe
        self._answer: Sequence[ServerSync] | None = None

    async def servers(self) -> Sequence[ServerSync]:
        if self._answer is not None:
            return self._answer
        answer = await self._probe.servers()
        if any(server.sync_always is not None for server in answer):
            self._answer = answer
        return answer


def durability_problems(
    stream: str, storage: api.StorageType, servers: Sequence[ServerSync]
) -> list[str]:
    """Why a PubAck of ``stream`` might not survive a crash; empty: it does."""
    problems: list[str] = []
    if _normal("storage", storage) != api.StorageType.FILE.value:
        problems.append(
            f"stream {stream!r} is kept in memory: a NATS restart loses what it acknowledged"
        )
    answered = [server for server in servers if server.sync_always is not None]
    if not answered:
        tried = "; ".join(f"{s.url}: {s.detail}" for s in servers) or "no monitoring URL"
        problems.append(f"no NATS server's fsync setting could be read ({tried})")
    for server in answered:
        if not server.sync_always:
            problems.append(
                f"NATS server {server.detail or server.url} ({server.url}) does not fsync "
                "every write (its jetstream block lacks `sync_interval: always`): an "
                "acknowledged event can be lost with the machine"
            )
    return problems


async def check_durability(
    stream: str, storage: api.StorageType, probe: SyncProbe, *, allow_volatile: bool
) -> None:
    """Raise ``StreamDurabilityError`` for a stream whose PubAck is not durable, unless
    ``allow_volatile`` (then the servers are not asked at all)."""
    if allow_volatile:
        log.warning(
            "stream %s: durability not checked (streams.allow_volatile): acknowledged events "
            "may be lost with a NATS server",
            stream,
        )
        return
    servers = await probe.servers()
    for server in servers:
        if server.sync_always is None:
            log.warning("NATS monitoring at %s unreadable: %s", server.url, server.detail)
    problems = durability_problems(stream, storage, servers)
    if problems:
        raise StreamDurabilityError(
            f"refusing stream {stream!r}: "
            + "; ".join(problems)
            + ". Run every nats-server with `jetstream { sync_interval: always }` and file "
            "storage, point HEADWAY_STREAMS__MONITOR_URLS at their monitoring ports, or, on "
            "a dev server whose losses do not matter, set HEADWAY_STREAMS__ALLOW_VOLATILE=true"
        )


def monitor_urls(servers: Sequence[str], configured: Sequence[str]) -> tuple[str, ...]:
    """The ``/varz`` URLs to read: the configured ones, else each NATS host's port 8222."""
    if configured:
        return tuple(configured)
    hosts = (
        urlsplit(server if "://" in server else f"nats://{server}").hostname for server in servers
    )
    return tuple(dict.fromkeys(f"http://{host}:{MONITOR_PORT}" for host in hosts if host))


class VarzProbe:
    """``SyncProbe`` over each server's monitoring endpoint (``GET <url>/varz``)."""

    def __init__(self, urls: Sequence[str], timeout_s: float = 2.0) -> None:
        self._urls = tuple(url.rstrip("/") for url in urls)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def servers(self) -> Sequence[ServerSync]:
        async with aiohttp.ClientSession(timeout=self._timeout) as session:
            return await asyncio.gather(*(self._read(session, url) for url in self._urls))

    async def _read(self, session: aiohttp.ClientSession, url: str) -> ServerSync:
        try:
            async with session.get(f"{url}/varz") as answer:
                answer.raise_for_status()
                varz = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return ServerSync(url, None, f"{type(exc).__name__}: {exc}")
        jetstream = varz.get("jetstream") if isinstance(varz, dict) else None
        config = jetstream.get("config") if isinstance(jetstream, dict) else None
        if not isinstance(config, dict):
            return ServerSync(url, None, "no JetStream in its /varz (JetStream disabled?)")
        return ServerSync(
            url, bool(config.get("sync_always", False)), str(varz.get("server_name", ""))
        )
