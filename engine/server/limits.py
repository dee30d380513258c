"""Per-request limits of the server: body size, score candidates and tokens, JSON nesting.

Every limit is checked before any model work, and every refusal is an OpenAI-style error object
(``{"error": {"message", "type", "param", "code"}}``) naming the limit and the value that broke
it. The body limit is an ASGI middleware that refuses a declared ``Content-Length`` over the limit
without reading the body, and stops reading a chunked body as soon as it passes the limit.

Not here: what a valid request looks like (``engine.server.schemas``), how a body is parsed
(``engine.server.body``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.errors import AKVError

MiB = 1 << 20


class RequestError(AKVError):
    """A request the server refuses before reading it into the engine (HTTP 400 unless said).

    Attributes:
        code: the OpenAI-style error code (``"invalid_json"``, ``"body_too_large"``, ...).
    """

    def __init__(self, message: str, *, code: str, status: int = 400, field: str | None = None,
                 value: Any = None) -> None:
        super().__init__(message, field=field, value=value)
        self.code = code
        self.status = status


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on the work one request may ask for.

    Attributes:
        max_body_bytes: largest request body (declared or streamed), in bytes; larger is a 413.
        max_candidates: most candidates of one ``/v1/akv/score`` request; more is a 413.
        max_score_tokens: most candidate tokens (all candidates together) of one score request.
        max_json_depth: deepest nesting of arrays and objects in a body; deeper is a 400.
        intake_bytes: a chat or score body of at least this many bytes is screened in the intake
            process before the server parses it (``engine.server.intake``); 0: never.
    """

    max_body_bytes: int = 4 * MiB
    max_candidates: int = 64
    max_score_tokens: int = 4096
    max_json_depth: int = 64
    intake_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_candidates", "max_score_tokens", "max_json_depth", "intake_bytes"):
            value = getattr(self, name)
            least = 0 if name == "intake_bytes" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                kind = "a non-negative" if least == 0 else "a positive"
                raise AKVError(f"ServerLimits.{name} must be {kind} integer, got {value!r}", field=name,
                               value=value)

    def check_candidates(self, n: int) -> None:
        """Refuse a score request with more than ``max_candidates`` candidates (413)."""
        if n > self.max_candidates:
            raise RequestError(f"candidates: {n} candidates is more than this server's limit of "
                               f"{self.max_candidates} per request", code="too_many_candidates", status=413,
                               field="candidates", value=n)

    def check_score_tokens(self, n: int) -> None:
        """Refuse a score request whose candidates hold more than ``max_score_tokens`` tokens (413)."""
        if n > self.max_score_tokens:
            raise RequestError(f"candidates: {n} candidate tokens is more than this server's limit of "
                               f"{self.max_score_tokens} per request", code="too_many_tokens", status=413,
                               field="candidates", value=n)


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class BodyLimitMiddleware:
    """Reads each HTTP request body in full, up to ``max_bytes``, before the app sees it.

    A ``Content-Length`` over the limit is refused at once (nothing is read); a body without one
    (chunked) is refused as soon as the bytes received pass the limit. The app then gets the body
    from memory, and later ``receive`` calls (disconnect detection) go to the server.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, f"{declared} bytes (Content-Length)")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, f"more than {self.max_bytes} bytes (streamed)")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, got: str) -> None:
        body = json.dumps(error_body(f"body: the request body has {got}, more than this server's limit of "
                                     f"{self.max_bytes} bytes (--max-body-bytes)", "invalid_request_error",
                                     "body", "body_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None
    return None


_KINDS = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 413: "invalid_request_error",
          429: "rate_limit_error"}


def install_error_shape(app: Any) -> None:
    """Answer Starlette's own errors (unknown route 404, wrong method 405, ...) and any unexpected
    exception in the OpenAI error shape instead of ``{"detail"}`` or plain text."""
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        status = exc.status_code
        if status == 404:
            message = f"no route {request.method} {request.url.path}"
        elif status == 405:
            allowed = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow") or "another method"
            message = f"method {request.method} is not allowed on {request.url.path} (use {allowed})"
        else:
            message = str(exc.detail)
        kind = _KINDS.get(status, "server_error" if status >= 500 else "invalid_request_error")
        code = {404: "not_found", 405: "method_not_allowed"}.get(status)
        return JSONResponse(error_body(message, kind, None, code), status_code=status, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", "server_error", None, "internal_error"),
                            status_code=500)
