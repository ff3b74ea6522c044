"""A gateway's model store as a weights source, over HTTP(S) with a bearer credential.

``GET {url}/v1/weights/{version}`` is the listing; ``GET {url}/v1/weights/{version}/
{name}`` a file, with ``Range: bytes=<offset>-`` to resume (the gateway answers 206
from that byte; ``control/weights.py``). One kept-alive connection
(``http.client``: blocking, as its callers are, a fetch thread or the CLI); a request
on a connection the server closed while it sat idle is sent once more on a new one. A
file's body is read a chunk at a time and never held whole.

An https:// URL is verified with the context ``tls`` gives for each new connection
(the ``tls`` settings' client context, which follows certificate rotation), else with
the system's roots.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Callable, Iterator
from typing import NoReturn
from urllib.parse import quote, urlsplit

import msgspec

from headway.models.errors import ModelNotFoundError, WeightsUnavailable
from headway.models.weights.base import ArtifactListing

CHUNK_BYTES = 1 << 20
_listing_decoder = msgspec.json.Decoder(ArtifactListing)


class HttpSource:
    def __init__(
        self,
        url: str,
        token: str = "",
        *,
        timeout_s: float = 30.0,
        tls: Callable[[], ssl.SSLContext] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"weights url must be http(s)://host[:port], not {url!r}")
        self._url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s
        self._tls = tls
        self._chunk_bytes = chunk_bytes
        self._connection: http.client.HTTPConnection | None = None

    def describe(self) -> str:
        return self._url

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def listing(self, version: str) -> ArtifactListing:
        response = self._get(f"/v1/weights/{quote(version, safe='')}")
        body = response.read()
        if response.status != 200:
            self._refused(response.status, body, f"model {version}")
        try:
            return _listing_decoder.decode(body)
        except msgspec.DecodeError as exc:
            raise WeightsUnavailable(
                f"the weights store at {self._url} sent a malformed listing for {version}: {exc}"
            ) from exc

    def read(self, version: str, name: str, offset: int) -> Iterator[bytes]:
        path = f"/v1/weights/{quote(version, safe='')}/{quote(name, safe='')}"
        response = self._get(path, {"range": f"bytes={offset}-"} if offset else {})
        what = f"{name} of model {version}"
        if response.status not in (200, 206):
            self._refused(response.status, response.read(), what)
        content_range = response.getheader("content-range", "")
        if offset and (response.status != 206 or not content_range.startswith(f"bytes {offset}-")):
            self.close()
            raise WeightsUnavailable(
                f"the weights store at {self._url} did not answer {what} from byte {offset} "
                f"(status {response.status}, content-range {content_range[:80]!r})"
            )
        finished = False
        position = offset
        try:
            while chunk := response.read(self._chunk_bytes):
                position += len(chunk)
                yield chunk
            finished = True
        except (OSError, http.client.HTTPException) as exc:
            raise WeightsUnavailable(
                f"reading {what} from {self._url} stopped at byte {position}: "
                f"{type(exc).__name__} {exc}"
            ) from exc
        finally:
            if not finished:  # the rest of the body is unread: the connection is unusable
                self.close()

    def _get(self, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        sent = dict(headers or {})
        if self._token:
            sent["authorization"] = f"Bearer {self._token}"
        for attempt in (1, 2):
            reused = self._connection is not None
            connection = self._connection or self._connect()
            self._connection = connection
            try:
                connection.request("GET", self._prefix + path, headers=sent)
                return connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if reused and attempt == 1:
                    continue  # the server closed the idle connection: once more, on a new one
                raise WeightsUnavailable(
                    f"cannot reach the weights store at {self._url}: {type(exc).__name__} {exc}"
                ) from exc
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            context = self._tls() if self._tls is not None else ssl.create_default_context()
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout_s, context=context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)

    def _refused(self, status: int, body: bytes, what: str) -> NoReturn:
        message = _error_message(body)
        if status == 404:
            raise ModelNotFoundError(f"the weights store at {self._url} has no {what}: {message}")
        raise WeightsUnavailable(
            f"the weights store at {self._url} answered {status} for {what}: {message}"
        )


def _error_message(body: bytes) -> str:
    """The message of a ``{"error": {"message": ...}}`` body, else the body's start."""
    try:
        decoded = msgspec.json.decode(body)
        return str(decoded["error"]["message"])[:300]
    except (msgspec.DecodeError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")
