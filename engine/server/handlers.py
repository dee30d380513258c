"""Every caller mistake as an OpenAI error object whose message names the field and value.

:func:`install_error_handlers` maps request validation errors (pydantic's), the project's errors
(``engine.errors.AKVError``: its status, field and code; a full queue as 503 with ``Retry-After``, a
deadline as 504) and unexpected ``RuntimeError`` to ``{"error": {"message", "type", "param",
"code"}}``. The server (``engine.server.app``) and the proxy (``engine.server.proxy``) install them.

Not here: Starlette's own errors (``engine.server.limits.install_error_shape``).
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from engine.errors import AKVError, CapacityError
from engine.server.scheduler import TimeoutError_
from engine.server.served import error_response


def install_error_handlers(app: FastAPI) -> None:
    """Every caller mistake as an OpenAI error object whose message names the field and value."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        if err.get("type") == "json_invalid":
            return error_response(400, f"malformed JSON body: {err.get('ctx', {}).get('error', err.get('msg'))}",
                                  "invalid_request_error", "body", "json_invalid")
        shown = "missing" if err.get("type") == "missing" else json.dumps(err.get("input"), default=str)[:80]
        return error_response(400, f"{loc or 'body'}: {err.get('msg', 'invalid')} (got {shown})",
                              "invalid_request_error", loc or None, err.get("type"))

    @app.exception_handler(AKVError)
    async def _akv(request: Request, exc: AKVError) -> JSONResponse:
        if isinstance(exc, CapacityError):
            return error_response(503, str(exc), "overloaded_error", exc.field, "queue_full",
                                  headers={"Retry-After": "1"})
        if isinstance(exc, TimeoutError_):
            return error_response(504, str(exc), "timeout_error", exc.field, "timeout")
        code = getattr(exc, "code", None) or ("context_length_exceeded" if exc.status == 413 else type(exc).__name__)
        return error_response(exc.status, str(exc), "invalid_request_error", exc.field, code)

    @app.exception_handler(RuntimeError)
    async def _internal(request: Request, exc: RuntimeError) -> JSONResponse:
        return error_response(500, str(exc), "server_error")
