"""``POST /v1/chat/completions``, whole or streamed as server-sent events.

With a survival manager, ``session_id`` + ``tool_gap`` (or a reply that ends in a tool call)
pause the session on its tool (``engine.survival``). A request for ``MODEL@NAME`` gets served
policy ``NAME``'s schedule (``engine.server.policies``); it may not send schedule fields of its
own (400), and its reply says how the schedule was made (``usage.akv_policy``, ``X-AKV-Policy``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.errors import AKVError
from engine.request import Request as EngineRequest
from engine.results import ChatResult
from engine.served_policy import PolicyReport
from engine.server.body import json_body
from engine.server.prepare import PolicyStep, check_fields, prepare_chat
from engine.server.schemas import ChatRequest
from engine.server.served import Served, ServedDep, usage_json
from engine.server.tenants import tenant_of
from engine.survival import ToolGap
from engine.toolcalls import reply_message, tool_names

router = APIRouter()
ChatBody = Annotated[ChatRequest, Depends(json_body(ChatRequest))]


@router.post("/v1/chat/completions", response_model=None)
async def chat(req: ChatBody, request: Request, s: ServedDep) -> Any:
    t0 = time.perf_counter()
    tenant = tenant_of(request.state)
    sid = tenant.session_key(req.session_id)  # sessions are per tenant
    missing = s.unknown_model(req.model)
    if missing is not None:
        return missing
    policy = s.policy_of(req.model)
    check_fields(req, policy, s.engine.name)
    # the request object, its validation, session check and tokenization on a pool thread, never on
    # the engine thread; from here on the same object goes to the scheduler, the engine and its decoder
    step = PolicyStep(s.policies, policy) if policy is not None else None
    chat_req = await asyncio.to_thread(prepare_chat, s.engine, req, s.sessions, sid, tenant.salt, s.limits, step)
    if chat_req.policy is not None:
        s.policies.count(chat_req.policy)
    gap = ToolGap.from_wire(req.tool_gap) if req.tool_gap is not None else None
    if gap is not None and req.session_id is None:
        raise AKVError("tool_gap: a paused session needs a session_id", field="tool_gap", value=req.tool_gap)
    rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    model = req.model if policy is not None and req.model is not None else s.engine.name
    if req.stream:
        return await _stream(s, req, chat_req, gap, rid, t0, sid, model)
    result: ChatResult = await s.run(s.new_job(req.timeout, chat=chat_req, session=sid, tool_gap=gap))
    s.sessions.update(sid, chat_req.messages, chat_req.schedule)
    s.metrics.latency.observe(time.perf_counter() - t0)
    parse = bool(chat_req.tools) and chat_req.tool_choice != "none"
    message, finish = reply_message(result.text, result.finish_reason,
                                    tool_names(chat_req.tools) if parse else False)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if req.return_token_ids:
        choice["token_ids"] = list(result.token_ids)
    body = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [choice], "usage": _usage(result, chat_req.policy)}
    if chat_req.policy is None:
        return body
    return JSONResponse(body, headers=_policy_headers(chat_req.policy))


def _usage(result: ChatResult, report: PolicyReport | None) -> dict[str, Any]:
    """The reply's ``usage``; with a served policy, ``akv_policy`` too (its name, ``ok``, and when not
    ok the outcome, reason and fallback)."""
    usage = usage_json(result.usage)
    if report is not None:
        usage["akv_policy"] = report.to_json()
    return usage


def _policy_headers(report: PolicyReport | None) -> dict[str, str]:
    return {"X-AKV-Policy": report.header} if report is not None else {}


async def _stream(s: Served, req: ChatRequest, chat_req: EngineRequest, gap: ToolGap | None, rid: str, t0: float,
                  sid: str | None, model: str) -> Response:
    pieces: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    job = s.new_job(req.timeout, chat=chat_req, on_text=lambda p: loop.call_soon_threadsafe(pieces.put_nowait, p),
                    session=sid, tool_gap=gap)
    s.scheduler.submit(job)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    # Wait for the first piece or the end, so that errors before generation get a proper status.
    first = asyncio.ensure_future(pieces.get())
    try:
        await asyncio.wait({first, job.future}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        job.cancel.set()
        first.cancel()
        raise
    if job.future.done() and job.future.exception() is not None and not first.done():
        first.cancel()
        raise job.future.exception()  # type: ignore[misc]

    async def events() -> AsyncIterator[str]:
        nonlocal first
        try:
            yield chunk({"role": "assistant", "content": ""})
            got_first = False
            while True:
                if first.done():
                    if not got_first:
                        s.metrics.ttft.observe(time.perf_counter() - t0)
                        got_first = True
                    yield chunk({"content": first.result()})
                    first = asyncio.ensure_future(pieces.get())
                    continue
                await asyncio.wait({first, job.future}, return_when=asyncio.FIRST_COMPLETED)
                if job.future.done() and not first.done():
                    first.cancel()
                    break
            while not pieces.empty():
                yield chunk({"content": pieces.get_nowait()})
            error = job.future.exception()
            if error is not None:
                status = getattr(error, "status", 500)
                yield f"data: {json.dumps({'error': {'message': str(error), 'code': status}})}\n\n"
                return
            result: ChatResult = job.future.result()
            s.sessions.update(sid, chat_req.messages, chat_req.schedule)
            s.metrics.latency.observe(time.perf_counter() - t0)
            yield chunk({}, result.finish_reason)
            if include_usage:
                body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": model, "choices": [], "usage": _usage(result, chat_req.policy)}
                yield f"data: {json.dumps(body)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            if not job.future.done():
                job.cancel.set()  # the client disconnected mid-stream: stop and free the locks
            if not first.done():
                first.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                                      **_policy_headers(chat_req.policy)})
