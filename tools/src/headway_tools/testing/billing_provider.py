"""A local stand-in for Stripe's meter events API, for tests and smoke tests.

``POST /v1/billing/meter_events``, form-encoded as Stripe takes it: ``event_name``,
``payload[stripe_customer_id]``, ``payload[value]`` (a whole number), and optional
``identifier`` and ``timestamp``. It keeps what a billing check needs: the accepted
events, and their values summed per (customer, event name).

It enforces what makes the export safe to retry, as Stripe does:

- ``Authorization: Bearer <api_key>``, else 401;
- the ``Idempotency-Key``: the first successful answer to a key is kept; the same key
  with the same parameters gets that answer again (``Idempotent-Replayed: true``) and
  counts nothing; with other parameters, 400 ``idempotency_error``. Errors are not
  kept (as Stripe keeps none for requests that never started executing);
- the event's ``identifier`` is unique: a second event that names one already
  accepted is refused with 400 ``resource_already_exists`` (``param: identifier``);
- Stripe's lengths: an ``Idempotency-Key`` over 255 characters and an ``identifier``
  over 100 are refused with 400 ``invalid_request_error`` (nothing counted).

Fault injection: ``fail_next(n, status)`` answers the next ``n`` requests with that
status without processing them; ``lose_next_response(n)`` processes the next ``n``
and then drops the connection unanswered, as when a response is lost on the way
back; a client that retries with the same key must not be counted twice.
``expire_idempotency_keys()`` forgets the keys (Stripe keeps them 24 hours), leaving
the identifiers to catch a resend.

``GET /_fake/sums`` (with the bearer key) shows the sums, for a smoke test that runs
this as a process: ``python -m headway_tools.testing.billing_provider --port 8787``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from aiohttp import web

METER_EVENTS_PATH = "/v1/billing/meter_events"
SUMS_PATH = "/_fake/sums"
DEFAULT_API_KEY = "sk_test_headway"
_FIELDS = frozenset(
    {"event_name", "payload[stripe_customer_id]", "payload[value]", "identifier", "timestamp"}
)
MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_IDENTIFIER_CHARS = 100
_REQUIRED = ("event_name", "payload[stripe_customer_id]", "payload[value]")

Params = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MeterEvent:
    """One accepted event."""

    identifier: str
    event_name: str
    customer: str
    value: int
    timestamp: int
    idempotency_key: str | None


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    body: Mapping[str, object]


class BillingProvider:
    """The fake provider on a loopback port; ``start()`` after ``stop()`` comes back on
    the same port with its state kept, so a test can take it away and bring it back."""

    def __init__(self, api_key: str = DEFAULT_API_KEY, port: int = 0) -> None:
        self.api_key = api_key
        self.port = port
        """0 until the first start picks a free one."""
        self.events: list[MeterEvent] = []
        self.sums: dict[tuple[str, str], int] = {}
        """(customer, event name) → the sum of accepted values."""
        self.attempts: list[str | None] = []
        """The ``Idempotency-Key`` of every request to the endpoint, in order of arrival."""
        self._answers: dict[str, tuple[Params, _Answer]] = {}
        self._identifiers: set[str] = set()
        self._failures: list[int] = []
        self._responses_to_lose = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    def sum_of(self, customer: str, event_name: str) -> int:
        return self.sums.get((customer, event_name), 0)

    def fail_next(self, n: int, status: int = 500) -> None:
        """Answer the next ``n`` requests with ``status``, processing nothing."""
        self._failures.extend([status] * n)

    def lose_next_response(self, n: int) -> None:
        """Process the next ``n`` requests, then close each connection unanswered."""
        self._responses_to_lose += n

    def expire_idempotency_keys(self) -> None:
        """Forget every key's answer, as Stripe does after 24 hours; identifiers stay."""
        self._answers.clear()

    async def start(self) -> BillingProvider:
        if self._runner is not None:
            raise RuntimeError(f"the billing provider on port {self.port} is already running")
        app = web.Application()
        app.router.add_post(METER_EVENTS_PATH, self._meter_event)
        app.router.add_get(SUMS_PATH, self._sums)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> BillingProvider:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _meter_event(self, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Idempotency-Key")
        self.attempts.append(key)
        if not self._authorized(request):
            return _error(401, "invalid_request_error", "Invalid API Key provided")
        if self._failures:
            status = self._failures.pop(0)
            return _error(status, "api_error", f"injected failure ({status})")
        if key is not None and len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
            return _error(
                400,
                "invalid_request_error",
                f"Idempotency-Key is {len(key)} characters; the most is "
                f"{MAX_IDEMPOTENCY_KEY_CHARS}",
            )
        form = await request.post()
        params: Params = tuple(sorted((name, str(value)) for name, value in form.items()))
        if key is None:
            answer = self._create(dict(params), key)
        elif key in self._answers:
            first_params, answer = self._answers[key]
            if first_params != params:
                return _error(
                    400,
                    "idempotency_error",
                    f"Keys for idempotent requests can only be used with the same parameters "
                    f"they were first used with; {key!r} was used with other parameters",
                )
            if not self._lose_response(request):
                return _json(answer, replayed=True)
        else:
            answer = self._create(dict(params), key)
            if answer.status == 200:
                self._answers[key] = (params, answer)
        if self._lose_response(request):
            return web.Response()  # never written: the transport is closed
        return _json(answer, replayed=False)

    def _lose_response(self, request: web.Request) -> bool:
        if self._responses_to_lose == 0:
            return False
        self._responses_to_lose -= 1
        if request.transport is not None:
            request.transport.close()
        return True

    def _create(self, params: dict[str, str], key: str | None) -> _Answer:
        unknown = sorted(set(params) - _FIELDS)
        if unknown:
            return _problem(400, "parameter_unknown", unknown[0], "Received unknown parameter")
        for name in _REQUIRED:
            if not params.get(name):
                return _problem(400, "parameter_missing", name, "Missing required param")
        value, timestamp = params["payload[value]"], params.get("timestamp", "")
        if not value.isdigit():
            return _problem(400, "parameter_invalid_integer", "payload[value]", "Not a number")
        if timestamp and not timestamp.isdigit():
            return _problem(400, "parameter_invalid_integer", "timestamp", "Not a unix time")
        identifier = params.get("identifier") or f"fake_{secrets.token_hex(8)}"
        if len(identifier) > MAX_IDENTIFIER_CHARS:
            return _problem(
                400, "string_too_long", "identifier", f"At most {MAX_IDENTIFIER_CHARS} characters"
            )
        if identifier in self._identifiers:
            return _problem(
                400, "resource_already_exists", "identifier", "An event with it already exists"
            )
        event = MeterEvent(
            identifier,
            params["event_name"],
            params["payload[stripe_customer_id]"],
            int(value),
            int(timestamp) if timestamp else int(time.time()),
            key,
        )
        self._identifiers.add(identifier)
        self.events.append(event)
        sum_key = (event.customer, event.event_name)
        self.sums[sum_key] = self.sums.get(sum_key, 0) + event.value
        return _Answer(200, _event_body(event))

    async def _sums(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, "invalid_request_error", "Invalid API Key provided")
        sums = [
            {"customer": customer, "event_name": name, "value": value}
            for (customer, name), value in sorted(self.sums.items())
        ]
        return web.json_response({"sums": sums, "events": len(self.events)})

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "")
        return secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())


def _event_body(event: MeterEvent) -> dict[str, object]:
    return {
        "object": "billing.meter_event",
        "created": event.timestamp,
        "event_name": event.event_name,
        "identifier": event.identifier,
        "livemode": False,
        "payload": {"stripe_customer_id": event.customer, "value": str(event.value)},
        "timestamp": event.timestamp,
    }


def _problem(status: int, code: str, param: str, message: str) -> _Answer:
    error = {"type": "invalid_request_error", "code": code, "param": param, "message": message}
    return _Answer(status, {"error": error})


def _error(status: int, error_type: str, message: str) -> web.Response:
    return _json(_Answer(status, {"error": {"type": error_type, "message": message}}), False)


def _json(answer: _Answer, replayed: bool) -> web.Response:
    headers = {"Idempotent-Replayed": "true"} if replayed else {}
    return web.Response(
        status=answer.status,
        text=json.dumps(answer.body),
        content_type="application/json",
        headers=headers,
    )


async def _serve(port: int, api_key: str) -> None:
    async with BillingProvider(api_key, port) as provider:
        print(f"fake billing provider at {provider.base_url} (api key {api_key})", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the fake billing provider until Ctrl-C.")
    parser.add_argument("--port", type=int, default=8787)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    arguments = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(arguments.port, arguments.api_key))


if __name__ == "__main__":
    main()
