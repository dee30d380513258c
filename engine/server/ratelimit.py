"""Per-key limits of the server: requests in flight and requests per minute, for each tenant.

One tenant (an API key, ``engine.server.tenants``) cannot take the engine from the others: each has
at most ``max_concurrent`` model requests in flight and a token bucket of ``burst`` requests that
refills at ``per_minute`` a minute. A request beyond either is answered at once, before its body is
read, with 429 in the OpenAI error shape (``type: requests``; code ``too_many_concurrent_requests``
or ``rate_limit_exceeded``) and ``Retry-After`` (seconds, rounded up: when the bucket holds a token
again; 1 for concurrency). Only the routes that reach the engine count (``POST`` under ``/v1/``
but ``/v1/models``); ``/health`` and ``/metrics`` never do. The anonymous tenant of a keyless
server is one tenant like any other. Limits of 0 are off (the default: a single-user server).

Not here: who a tenant is (``engine.server.tenants``), the body and payload limits
(``engine.server.limits``), the engine queue's own bound (``engine.server.scheduler``: 503).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from engine.errors import AKVError

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


@dataclass(frozen=True)
class TenantLimits:
    """Per-tenant bounds (0: no bound).

    Attributes:
        max_concurrent: model requests of one tenant in flight at once.
        per_minute: requests a minute a tenant's bucket refills by.
        burst: the bucket's size (0: ``max(1, ceil(per_minute / 6))``, ten seconds' worth).
    """

    max_concurrent: int = 0
    per_minute: float = 0.0
    burst: int = 0

    def __post_init__(self) -> None:
        for name in ("max_concurrent", "burst"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise AKVError(f"TenantLimits.{name} must be an integer >= 0, got {value!r}", field=name, value=value)
        rate = self.per_minute
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not (math.isfinite(rate) and rate >= 0):
            raise AKVError(f"TenantLimits.per_minute must be a finite number >= 0, got {rate!r}", field="per_minute",
                           value=rate)

    @property
    def active(self) -> bool:
        return self.max_concurrent > 0 or self.per_minute > 0

    @property
    def bucket(self) -> float:
        return float(self.burst or max(1, math.ceil(self.per_minute / 6)))


class Gate:
    """The counters of every tenant (thread-safe; ``clock`` is injectable for tests)."""

    def __init__(self, limits: TenantLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._lock = threading.Lock()
        self._inflight: dict[str, int] = {}
        self._tokens: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)

    def enter(self, tenant: str) -> tuple[str, int] | None:
        """Admit one request of ``tenant`` (``None``), or say why not: (error code, Retry-After seconds)."""
        lim = self.limits
        with self._lock:
            if lim.max_concurrent and self._inflight.get(tenant, 0) >= lim.max_concurrent:
                return "too_many_concurrent_requests", 1
            if lim.per_minute:
                now = self.clock()
                tokens, at = self._tokens.get(tenant, (lim.bucket, now))
                tokens = min(lim.bucket, tokens + (now - at) * lim.per_minute / 60.0)
                if tokens < 1.0:
                    self._tokens[tenant] = (tokens, now)
                    return "rate_limit_exceeded", max(1, math.ceil((1.0 - tokens) * 60.0 / lim.per_minute))
                self._tokens[tenant] = (tokens - 1.0, now)
            self._inflight[tenant] = self._inflight.get(tenant, 0) + 1
            return None

    def leave(self, tenant: str) -> None:
        with self._lock:
            self._inflight[tenant] = max(0, self._inflight.get(tenant, 0) - 1)

    def inflight(self, tenant: str) -> int:
        with self._lock:
            return self._inflight.get(tenant, 0)


def counted(scope: Scope) -> bool:
    """Whether the request reaches the engine (and so counts against its tenant's limits)."""
    path = scope.get("path", "")
    return scope.get("method") == "POST" and path.startswith("/v1/") and path != "/v1/models"


class TenantLimitMiddleware:
    """ASGI middleware (inside the auth middleware, which names the tenant): 429 beyond a tenant's
    limits, before the body is read (module docstring)."""

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http" or not self.gate.limits.active or not counted(scope):
            await self.app(scope, receive, send)
            return
        tenant = getattr(scope.get("state", {}).get("tenant"), "name", "")
        refused = self.gate.enter(tenant)
        if refused is not None:
            await _too_many(send, *refused, self.gate.limits)
            return
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self.gate.leave(tenant)

        async def send_and_leave_before_the_last_byte(message: Any) -> None:
            # The slot is given back before the response's last chunk goes out, so a client that has
            # its answer can send the next request at once (a release after ``send`` would race it).
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                leave()
            await send(message)

        try:
            await self.app(scope, receive, send_and_leave_before_the_last_byte)
        finally:
            leave()


async def _too_many(send: Callable[[Any], Awaitable[None]], code: str, retry: int, lim: TenantLimits) -> None:
    if code == "rate_limit_exceeded":
        message = f"rate limit reached: this key may make {lim.per_minute:g} requests a minute (burst {lim.bucket:g})"
    else:
        message = f"too many requests in flight: this key may have {lim.max_concurrent} at once"
    body = json.dumps({"error": {"message": message, "type": "requests", "param": None, "code": code}}).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", str(retry).encode())]})
    await send({"type": "http.response.body", "body": body})
