"""``POST /v1/cache/save`` and ``POST /v1/cache/load``: named KV snapshots of a session, per tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from engine.schedule import parse_schedule
from engine.server.body import json_body
from engine.server.schemas import CacheLoadRequest, CacheSaveRequest
from engine.server.served import ServedDep
from engine.server.tenants import tenant_of

router = APIRouter()
SaveBody = Annotated[CacheSaveRequest, Depends(json_body(CacheSaveRequest))]
LoadBody = Annotated[CacheLoadRequest, Depends(json_body(CacheLoadRequest))]


@router.post("/v1/cache/save")
async def cache_save(req: SaveBody, request: Request, s: ServedDep) -> dict[str, Any]:
    tenant = tenant_of(request.state)
    schedule = parse_schedule(req.schedule(), n_messages=len(req.messages))
    info = await s.run(s.new_job(None, call=lambda eng: s.snapshots.save(eng, tenant, req.name, req.messages,
                                                                         schedule, overwrite=req.overwrite)))
    return info.as_json()


@router.post("/v1/cache/load")
async def cache_load(req: LoadBody, request: Request, s: ServedDep) -> dict[str, Any]:
    tenant = tenant_of(request.state)
    info = await s.run(s.new_job(None, call=lambda eng: s.snapshots.load(eng, tenant, req.name)))
    return info.as_json()
