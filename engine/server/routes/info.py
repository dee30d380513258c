"""``GET /health``, ``GET /v1/models``, ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from engine.server.served import ServedDep

router = APIRouter()


@router.get("/health")
async def health(s: ServedDep, request: Request) -> dict[str, Any]:
    intake = getattr(request.app.state, "intake", None)
    return {"status": "ok", "model": s.engine.name, "queue_depth": s.scheduler.depth,
            "integrity_checks": s.scheduler.integrity_checks, "last_error": s.scheduler.last_error,
            "intake": intake.state if intake is not None else "off"}


@router.get("/v1/models")
async def models(s: ServedDep) -> dict[str, Any]:
    return {"object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "akv-rsi"} for m in s.model_ids]}


@router.get("/metrics")
async def prometheus(s: ServedDep) -> Response:
    return Response(s.metrics.render(), media_type="text/plain; version=0.0.4")
