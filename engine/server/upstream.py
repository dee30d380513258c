"""The proxy's upstream: one OpenAI-compatible server that speaks AKV's wire format (``akv serve``,
an AKV/SGLang server), reached with httpx (async), its answers relayed to the client as they come.

:class:`Upstream` holds one connection pool; :meth:`Upstream.open` sends a request once and returns
the response with its body unread, so a stream is relayed chunk by chunk (:func:`relay`) and a
client that hangs up closes the upstream's stream too (the upstream then stops generating). A
server that cannot be reached, or breaks the connection before answering, is an
:class:`UpstreamError` (502); one that does not answer in time, 504. The upstream's own answers,
errors included, reach the client with their status, body and the headers that matter
(:data:`PASSED_HEADERS`).

Not for: deciding schedules or rewriting bodies (``engine.server.proxy``); no retries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping

import httpx
from fastapi.responses import StreamingResponse

from engine.errors import AKVError

log = logging.getLogger("akv.proxy")

PASSED_HEADERS = ("content-type", "retry-after", "x-akv-policy", "www-authenticate", "cache-control",
                  "x-accel-buffering")
"""Response headers of the upstream that the client gets (the others are the connection's)."""


class UpstreamError(AKVError):
    """The upstream could not be reached, broke the connection, or did not answer in time.

    Attributes:
        status: 502 (unreachable, or a broken answer) or 504 (no answer in time).
        code: ``upstream_unreachable``, ``upstream_error`` or ``upstream_timeout``.
    """

    transient = True

    def __init__(self, message: str, *, status: int = 502, code: str = "upstream_unreachable") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Upstream:
    """The server the proxy forwards to.

    Args:
        url: its base URL (``http://host:port``, no ``/v1``).
        timeout_s: the longest wait for an answer, and between two chunks of a stream.
        connect_s: the longest wait for a connection.
        api_key: the key sent upstream (``Authorization: Bearer``); ``None``: each client's own
            ``Authorization`` header is passed on as it came.
        max_connections: connections to the upstream open at once (more requests wait for one).

    Raises:
        AKVError: a URL that is not ``http(s)://...``, or a bad time.
    """

    def __init__(self, url: str, *, timeout_s: float = 600.0, connect_s: float = 10.0, api_key: str | None = None,
                 max_connections: int = 256) -> None:
        if not url.startswith(("http://", "https://")) or len(url) < 10:
            raise AKVError(f"--upstream {url!r}: give the server's base URL, e.g. http://10.0.0.5:30000",
                           field="upstream", value=url)
        for name, value in (("timeout_s", timeout_s), ("connect_s", connect_s)):
            if not value > 0:
                raise AKVError(f"upstream {name} must be positive, got {value}", field=name, value=value)
        self.url = url.rstrip("/").removesuffix("/v1")
        self.api_key = api_key
        self._timeout = httpx.Timeout(timeout_s, connect=connect_s)
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=32)
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"Upstream({self.url!r}, key={'set' if self.api_key else 'passed on'})"

    @property
    def client(self) -> httpx.AsyncClient:
        """The connection pool (made on first use, inside the app's event loop)."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, limits=self._limits)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def headers(self, authorization: str | None) -> dict[str, str]:
        out = {"content-type": "application/json"}
        auth = f"Bearer {self.api_key}" if self.api_key else authorization
        if auth:
            out["authorization"] = auth
        return out

    async def open(self, method: str, path: str, *, content: bytes | None = None,
                   authorization: str | None = None) -> httpx.Response:
        """Send one request; the response with its body unread (the caller closes it).

        Raises:
            UpstreamError: no connection, a connection broken before the answer (502), no answer
                in time (504).
        """
        request = self.client.build_request(method, self.url + path, content=content,
                                            headers=self.headers(authorization))
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException as err:
            raise UpstreamError(f"upstream {self.url}: no answer to {method} {path} in time ({type(err).__name__})",
                                status=504, code="upstream_timeout") from None
        except httpx.HTTPError as err:
            raise UpstreamError(f"upstream {self.url} is unreachable ({type(err).__name__}: {err})") from None

    async def read(self, response: httpx.Response) -> bytes:
        """The whole body of ``response``, closed after.

        Raises:
            UpstreamError: the connection broke, or the rest did not come in time.
        """
        try:
            return await response.aread()
        except httpx.TimeoutException as err:
            raise UpstreamError(f"upstream {self.url}: the answer did not come in time ({type(err).__name__})",
                                status=504, code="upstream_timeout") from None
        except httpx.HTTPError as err:
            raise UpstreamError(f"upstream {self.url} broke off its answer ({type(err).__name__}: {err})",
                                code="upstream_error") from None
        finally:
            await response.aclose()


def passed_headers(response: httpx.Response, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers of ``response`` that the client gets (:data:`PASSED_HEADERS`), then ``extra``."""
    out = {k: response.headers[k] for k in PASSED_HEADERS if k in response.headers}
    return out | dict(extra or {})


def is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def broken_event(url: str, err: Exception) -> bytes:
    """The server-sent event that ends a stream the upstream broke off (as the server ends a stream
    whose request failed after it started)."""
    message = f"upstream {url} broke off the stream ({type(err).__name__}: {err})"
    return f"data: {json.dumps({'error': {'message': message, 'code': 502}})}\n\n".encode()


async def chunks(upstream: Upstream, response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of ``response`` as it arrives; a stream broken off ends with :func:`broken_event`.
    Closing the iterator (the client hung up) closes the upstream's response."""
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.HTTPError as err:
        log.warning("upstream %s broke off an answer: %s: %s", upstream.url, type(err).__name__, err)
        if is_stream(response):
            yield broken_event(upstream.url, err)
    finally:
        await response.aclose()


def relay(upstream: Upstream, response: httpx.Response) -> StreamingResponse:
    """The client's answer: ``response``'s status, headers that matter and body, as they come."""
    return StreamingResponse(chunks(upstream, response), status_code=response.status_code,
                             headers=passed_headers(response))
