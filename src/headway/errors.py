"""One exception tree for everything a client can be told, and one table to HTTP.

Each ``HeadwayError`` subclass carries its ``status`` and ``type``, and its docstring is what
the OpenAPI document says of it on each route that raises it. Dependency errors are translated
where they happen (``raise X from exc``); the HTTP edge (``http/edge.py``) turns a
``HeadwayError`` into ``{"error": {"type", "message"}}`` and anything else into a bare 500
``internal_error`` with no detail.
"""

from __future__ import annotations


class HeadwayError(Exception):
    """Base of every error a client may see."""

    status = 500
    type = "internal_error"
    quiet = False
    """Counted but not logged: expected under load, where a log line per request
    would cost more than the answer."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s
        self.headers = headers or {}


class InvalidRequest(HeadwayError):
    """The body could not be parsed as a JSON object."""

    status = 400
    type = "invalid_request"


class StorageLimitReached(HeadwayError):
    """The tenant keeps as many files, or as many bytes of files, as its limit allows; the
    message names the limit and the use. Delete files to go on: a retry alone does not
    help, so this is a 400 (as OpenAI answers its storage limit), which clients do not
    retry."""

    status = 400
    type = "storage_limit_reached"


class Unauthorized(HeadwayError):
    """No API key, or one that matches no tenant."""

    status = 401
    type = "unauthorized"


class Forbidden(HeadwayError):
    """The key is valid but may not use this endpoint."""

    status = 403
    type = "forbidden"


class NotFound(HeadwayError):
    """No such route, model or object."""

    status = 404
    type = "not_found"


class MethodNotAllowed(HeadwayError):
    """The route exists but not for this HTTP method."""

    status = 405
    type = "method_not_allowed"


class ModelMismatch(HeadwayError):
    """A chunk asks a worker for a model version it does not serve."""

    status = 409
    type = "model_mismatch"


class Conflict(HeadwayError):
    """The write clashes with what exists: a duplicate, an active rollout, the last admin key."""

    status = 409
    type = "conflict"


class LineNotLive(HeadwayError):
    """The executor's token asked to run a line that its batch no longer runs (cancelled,
    expired, ended) or that is not that batch's: the executor skips the line. Not a 403,
    which would mean the executor's own token is wrong and pause every tenant's lines."""

    status = 409
    type = "line_not_live"


class PayloadTooLarge(HeadwayError):
    """The body is larger than the configured limit."""

    status = 413
    type = "payload_too_large"


class UnsupportedMediaType(HeadwayError):
    """The body is declared as something other than JSON."""

    status = 415
    type = "unsupported_media_type"


class RangeNotSatisfiable(HeadwayError):
    """The Range asked for starts past the end of the file, or is not one byte range."""

    status = 416
    type = "range_not_satisfiable"


class ValidationFailed(HeadwayError):
    """The JSON is well-formed but violates the schema or a size limit."""

    status = 422
    type = "validation_error"


class QuotaExceeded(HeadwayError):
    """The tenant has used its quota; retry after ``retry_after_s``."""

    status = 429
    type = "quota_exceeded"


class LimitReached(HeadwayError):
    """A per-tenant or per-gateway bound on work in progress is reached (open batches,
    uploads at once); the message names it and the use. A 429 with ``Retry-After``, as
    OpenAI answers its batch queue limit: clients retry it later."""

    status = 429
    type = "limit_reached"


class AuthThrottled(HeadwayError):
    """Too many failed key checks from this address, or for keys beginning like this one;
    refused before the key is checked, retry after ``retry_after_s``."""

    status = 429
    type = "too_many_failed_keys"
    quiet = True


class Overloaded(HeadwayError):
    """The pool cannot take this work now; retry after ``retry_after_s``."""

    status = 503
    type = "overloaded"
    quiet = True


class NoReplicas(HeadwayError):
    """No replica of the model pool is ready."""

    status = 503
    type = "no_ready_replicas"
    quiet = True


class UpstreamFailed(HeadwayError):
    """A replica failed and no other could take the work."""

    status = 502
    type = "upstream_error"


class MeteringUnavailable(HeadwayError):
    """The gateway cannot make a usage event durable now, so it serves no billable work."""

    status = 503
    type = "metering_unavailable"


class UsageUnavailable(HeadwayError):
    """The usage ledger cannot be read now (not configured, or its database is away)."""

    status = 503
    type = "usage_unavailable"


class RegistryUnavailable(HeadwayError):
    """The registry's database cannot be reached now, or stays locked; retry later."""

    status = 503
    type = "registry_unavailable"


class StoreUnavailable(HeadwayError):
    """The batch store's database (Postgres, or the SQLite file locked) cannot be had now:
    nothing was changed; retry after ``Retry-After``."""

    status = 503
    type = "store_unavailable"


class DeadlineExceeded(HeadwayError):
    """The request's deadline passed before the work finished."""

    status = 504
    type = "deadline_exceeded"
    quiet = True


def error_body(exc: HeadwayError) -> dict[str, dict[str, str]]:
    return {"error": {"type": exc.type, "message": exc.message}}
