"""``POST /v1/akv/score``: log-likelihood of each candidate (an AKV extension SGLang servers lack)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from engine.server.body import json_body
from engine.server.prepare import prepare_score
from engine.server.schemas import ScoreRequest
from engine.server.served import ServedDep, usage_json
from engine.server.tenants import tenant_of

router = APIRouter()
ScoreBody = Annotated[ScoreRequest, Depends(json_body(ScoreRequest))]


@router.post("/v1/akv/score", response_model=None)
async def score(req: ScoreBody, request: Request, s: ServedDep) -> Any:
    """``Engine.score`` on the worker thread, after validation and tokenizing on a pool thread."""
    salt = tenant_of(request.state).salt
    missing = s.unknown_model(req.model)
    if missing is not None:
        return missing
    prepared = await asyncio.to_thread(prepare_score, s.engine, req, s.limits, salt)  # 413 before model work
    result = await s.run(s.new_job(req.timeout, call=lambda eng: eng.score(req.messages, req.candidates,
                                                                         prepared=prepared)))
    return {"object": "akv.score", "model": s.engine.name, "candidates": result.candidates,
            "logprobs": result.logprobs, "n_tokens": result.n_tokens, "best": result.best,
            "best_norm": result.best_norm, "usage": usage_json(result.usage)}
