"""What every route of the server shares: the engine, its scheduler and the per-app stores.

``create_app`` builds one :class:`Served` and keeps it in ``app.state.served``; routes take it
through the ``ServedDep`` dependency. :func:`error_response` is the OpenAI error object every
route and handler answers with.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from engine.cache.plan import TokenUsage
from engine.engine import Engine
from engine.served_policy import ServedPolicy
from engine.server.limits import ServerLimits
from engine.server.policies import Policies
from engine.server.prometheus import Metrics
from engine.server.scheduler import Job, Scheduler
from engine.server.sessions import Sessions
from engine.server.snapshots import SnapshotStore
from engine.server.tenants import Tenants


@dataclass
class Served:
    """The engine and the state around it that one app serves.

    Attributes:
        names: the model names requests may ask for (the engine's, ``default`` and aliases); with
            policies, also each name followed by ``@POLICY`` (``engine.server.policies``).
        timeout: the default deadline of a request, in seconds.
        policies: the policies served by model name.
    """

    engine: Engine
    scheduler: Scheduler
    sessions: Sessions
    metrics: Metrics
    snapshots: SnapshotStore
    tenants: Tenants
    limits: ServerLimits
    names: frozenset[str]
    timeout: float
    policies: Policies

    def new_job(self, deadline_s: float | None, **kw: Any) -> Job:
        loop = asyncio.get_running_loop()
        return Job(loop=loop, future=loop.create_future(), deadline=time.monotonic() + (deadline_s or self.timeout),
                   **kw)

    async def run(self, job: Job) -> Any:
        """Queue ``job`` on the engine thread and wait for its result (a client that goes away cancels it)."""
        self.scheduler.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            job.cancel.set()
            raise

    def unknown_model(self, model: str | None) -> JSONResponse | None:
        """The 404 for a model this app does not serve (``None``: served, or not named)."""
        if self.policies.split(model, self.names)[0]:
            return None
        ids = ", ".join(repr(m) for m in self.model_ids)
        return error_response(404, f"model: {model!r} is not served here (serving {ids})",
                              "not_found_error", "model", "model_not_found")

    def policy_of(self, model: str | None) -> ServedPolicy | None:
        """The policy a served ``model`` names (``MODEL@NAME``), or ``None`` for a plain model."""
        return self.policies.split(model, self.names)[1]

    @property
    def model_ids(self) -> list[str]:
        """What ``GET /v1/models`` lists: the engine's name, then ``NAME@POLICY`` for each policy."""
        return [self.engine.name, *self.policies.model_ids(self.engine.name)]


def served(request: Request) -> Served:
    return request.app.state.served


ServedDep = Annotated[Served, Depends(served)]


def error_response(status: int, message: str, kind: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-style error object ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def usage_json(u: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens, "prefill_tokens": u.prefill_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens, "drop_skipped_tokens": u.drop_skipped_tokens,
                                  "repos_tokens": u.repos_tokens},
    }
