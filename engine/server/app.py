"""The OpenAI-compatible AKV server: routes, error mapping and streaming.

Stateless interface, stateful serving: every request carries the full message list and the
full cumulative schedule; the engine's history-aware radix tree reuses everything it can.

Routes (``engine.server.routes``, one router per concern): ``POST /v1/chat/completions``
(``stream`` as server-sent events), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text), ``POST /v1/cache/save``,
``POST /v1/cache/load``, ``POST /v1/akv/score`` (log-likelihood of candidates; an AKV extension
that SGLang-based servers lack). With a survival manager, ``session_id`` + ``tool_gap`` (or a reply that
ends in a tool call) pause the session on its tool (``engine.survival``). Every error is an OpenAI-style object
``{"error": {"message", "type", "param", "code"}}`` whose message names the field and value.
With API keys (``engine.server.tenants``) every route but ``/health`` (and ``/metrics`` when public)
answers 401 without ``Authorization: Bearer KEY``; each key is a tenant with its own sessions,
snapshots (``engine.server.snapshots``) and cache namespace. With served policies
(``engine.server.policies``), ``GET /v1/models`` also lists ``MODEL@NAME`` for each, and a chat
that names one gets the policy's schedule.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from engine.engine import Engine
from engine.served_policy import ServedPolicy
from engine.server.handlers import install_error_handlers
from engine.server.intake import Intake
from engine.server.limits import BodyLimitMiddleware, ServerLimits, install_error_shape
from engine.server.policies import Policies, PolicyCollector
from engine.server.prometheus import Metrics
from engine.server.ratelimit import Gate, TenantLimitMiddleware, TenantLimits
from engine.server.routes import ROUTERS
from engine.server.scheduler import Scheduler
from engine.server.served import Served, usage_json
from engine.server.sessions import Sessions
from engine.server.snapshots import SnapshotStore
from engine.server.tenants import AuthMiddleware, Tenants
from engine.survival import SurvivalManager

__all__ = ["create_app", "usage_json"]


def create_app(engine: Engine, *, snapshot_dir: str | Path, max_queue: int = 64, max_batch: int = 8,
               timeout: float = 600.0, aliases: tuple[str, ...] = (), survival: SurvivalManager | None = None,
               tenants: Tenants | None = None, snapshot_secret: bytes | None = None,
               snapshot_quota: int | None = None, limits: ServerLimits | None = None,
               tenant_limits: TenantLimits | None = None,
               policies: Policies | Sequence[ServedPolicy] = ()) -> FastAPI:
    """Build the app around ``engine`` (the scheduler starts with the app and stops with it).

    ``survival``: a :class:`engine.survival.SurvivalManager` over ``engine.tree`` (default: none).
    ``tenants``: API keys and their namespaces (``engine.server.tenants``; default: no keys, one
    anonymous tenant). ``snapshot_secret``: the HMAC key of snapshot files (default: a secret file
    generated in ``snapshot_dir``); ``snapshot_quota``: bytes of snapshots per tenant (default: no limit).
    ``limits``: body size, score candidates and tokens, JSON depth (``engine.server.limits``).
    ``tenant_limits``: requests in flight and per minute for each API key (``engine.server.ratelimit``;
    default: none). ``policies``: policies served by model name, ``MODEL@NAME``
    (``engine.server.policies``; a sequence is served under the default time limit).
    """
    policies = policies if isinstance(policies, Policies) else Policies(policies)
    limits = limits if limits is not None else ServerLimits()
    scheduler = Scheduler(engine, max_queue=max_queue, max_batch=max_batch, timeout=timeout, survival=survival)
    tenants = tenants if tenants is not None else Tenants()
    metrics = Metrics(scheduler)
    metrics.registry.register(PolicyCollector(policies))
    served = Served(engine, scheduler, Sessions(), metrics,
                    SnapshotStore(snapshot_dir, secret=snapshot_secret, quota_bytes=snapshot_quota), tenants, limits,
                    frozenset({engine.name, "default", *aliases}), timeout, policies)

    intake = Intake(engine.window, limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()
            intake.close()
            policies.close()

    _ = engine.renderer.token_bound  # built now (once per tokenizer), not on the first request
    app = FastAPI(title="AKV engine", lifespan=lifespan)
    app.state.served = served
    app.state.scheduler = scheduler
    app.state.engine = engine
    app.state.tenants = tenants
    app.state.limits = limits
    app.state.intake = intake
    app.state.gate = Gate(tenant_limits or TenantLimits())
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)  # 413 before reading a huge body
    install_error_shape(app)  # 404/405 and unexpected errors as OpenAI error objects
    app.add_middleware(TenantLimitMiddleware, gate=app.state.gate)  # 429 beyond a key's limits, body unread
    app.add_middleware(AuthMiddleware, tenants=tenants)  # 401 without a valid key; request.state.tenant
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app
