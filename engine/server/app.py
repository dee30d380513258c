"""The OpenAI-compatible AKV server: routes, error mapping and streaming.

Stateless interface, stateful serving: every request carries the full message list and the
full cumulative schedule; the engine's history-aware radix tree reuses everything it can.

Routes: ``POST /v1/chat/completions`` (``stream`` as server-sent events), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text), ``POST /v1/cache/save``,
``POST /v1/cache/load``, ``POST /v1/akv/score`` (log-likelihood of candidates; an AKV extension
that SGLang-based servers lack). With a survival manager, ``session_id`` + ``tool_gap`` (or a reply that
ends in a tool call) pause the session on its tool (``engine.survival``). Every error is an OpenAI-style object
``{"error": {"message", "type", "param", "code"}}`` whose message names the field and value.
With API keys (``engine.server.tenants``) every route but ``/health`` (and ``/metrics`` when public)
answers 401 without ``Authorization: Bearer KEY``; each key is a tenant with its own sessions,
snapshots (``engine.server.snapshots``) and cache namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.engine import ChatResult, Engine
from engine.errors import AKVError, CapacityError
from engine.plan import TokenUsage
from engine.schedule import parse_schedule
from engine.server.body import json_body
from engine.server.limits import BodyLimitMiddleware, ServerLimits, install_error_shape
from engine.server.metrics import Metrics
from engine.server.prepare import prepare_chat, prepare_score
from engine.server.scheduler import Job, Scheduler, TimeoutError_
from engine.server.schemas import CacheLoadRequest, CacheSaveRequest, ChatRequest, ScoreRequest
from engine.server.sessions import Sessions
from engine.server.snapshots import SnapshotStore
from engine.server.tenants import AuthMiddleware, Tenants, tenant_of
from engine.survival import SurvivalManager, ToolGap
from engine.toolcalls import reply_message

DEFAULT_MAX_TOKENS = 256
ChatBody = Annotated[ChatRequest, Depends(json_body(ChatRequest))]
ScoreBody = Annotated[ScoreRequest, Depends(json_body(ScoreRequest))]
SaveBody = Annotated[CacheSaveRequest, Depends(json_body(CacheSaveRequest))]
LoadBody = Annotated[CacheLoadRequest, Depends(json_body(CacheLoadRequest))]


def _error(status: int, message: str, kind: str, param: str | None = None, code: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def usage_json(u: TokenUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens, "prefill_tokens": u.prefill_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens, "drop_skipped_tokens": u.drop_skipped_tokens,
                                  "repos_tokens": u.repos_tokens},
    }


def create_app(engine: Engine, *, snapshot_dir: str | Path, max_queue: int = 64, max_batch: int = 8,
               timeout: float = 600.0, aliases: tuple[str, ...] = (), survival: SurvivalManager | None = None,
               tenants: Tenants | None = None, snapshot_secret: bytes | None = None,
               snapshot_quota: int | None = None, limits: ServerLimits | None = None) -> FastAPI:
    """Build the app around ``engine`` (the scheduler starts with the app and stops with it).

    ``survival``: a :class:`engine.survival.SurvivalManager` over ``engine.tree`` (default: none).
    ``tenants``: API keys and their namespaces (``engine.server.tenants``; default: no keys, one
    anonymous tenant). ``snapshot_secret``: the HMAC key of snapshot files (default: a secret file
    generated in ``snapshot_dir``); ``snapshot_quota``: bytes of snapshots per tenant (default: no limit).
    ``limits``: body size, score candidates and tokens, JSON depth (``engine.server.limits``).
    """
    limits = limits if limits is not None else ServerLimits()
    scheduler = Scheduler(engine, max_queue=max_queue, max_batch=max_batch, timeout=timeout, survival=survival)
    sessions = Sessions()
    metrics = Metrics(scheduler)
    store = SnapshotStore(snapshot_dir, secret=snapshot_secret, quota_bytes=snapshot_quota)
    tenants = tenants if tenants is not None else Tenants()
    names = {engine.name, "default", *aliases}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    app = FastAPI(title="AKV engine", lifespan=lifespan)
    app.state.scheduler = scheduler
    app.state.engine = engine
    app.state.tenants = tenants
    app.state.limits = limits
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)  # 413 before reading a huge body
    install_error_shape(app)  # 404/405 and unexpected errors as OpenAI error objects
    app.add_middleware(AuthMiddleware, tenants=tenants)  # 401 without a valid key; request.state.tenant

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        if err.get("type") == "json_invalid":
            return _error(400, f"malformed JSON body: {err.get('ctx', {}).get('error', err.get('msg'))}",
                          "invalid_request_error", "body", "json_invalid")
        value = err.get("input")
        shown = json.dumps(value)[:80] if value is not None else "missing"
        return _error(400, f"{loc or 'body'}: {err.get('msg', 'invalid')} (got {shown})", "invalid_request_error",
                      loc or None, err.get("type"))

    @app.exception_handler(AKVError)
    async def _akv(request: Request, exc: AKVError) -> JSONResponse:
        if isinstance(exc, CapacityError):
            return _error(503, str(exc), "overloaded_error", exc.field, "queue_full", headers={"Retry-After": "1"})
        if isinstance(exc, TimeoutError_):
            return _error(504, str(exc), "timeout_error", exc.field, "timeout")
        code = getattr(exc, "code", None) or ("context_length_exceeded" if exc.status == 413 else type(exc).__name__)
        return _error(exc.status, str(exc), "invalid_request_error", exc.field, code)

    @app.exception_handler(RuntimeError)
    async def _internal(request: Request, exc: RuntimeError) -> JSONResponse:
        return _error(500, str(exc), "server_error")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": engine.name, "queue_depth": scheduler.depth,
                "integrity_checks": scheduler.integrity_checks, "last_error": scheduler.last_error}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": engine.name, "object": "model", "created": 0,
                                            "owned_by": "akv-rsi"}]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    async def run(job: Job) -> Any:
        scheduler.submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            job.cancel.set()  # the client went away while waiting
            raise

    def new_job(deadline_s: float | None, **kw: Any) -> Job:
        loop = asyncio.get_running_loop()
        return Job(loop=loop, future=loop.create_future(), deadline=time.monotonic() + (deadline_s or timeout), **kw)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(req: ChatBody, request: Request) -> Any:
        t0 = time.perf_counter()
        tenant = tenant_of(request.state)
        sid = tenant.session_key(req.session_id)  # sessions are per tenant
        if req.model is not None and req.model not in names:
            return _error(404, f"model: {req.model!r} is not served here (serving {engine.name!r})",
                          "not_found_error", "model", "model_not_found")
        if req.n != 1:
            raise AKVError(f"n: only n=1 is supported, got {req.n}", field="n", value=req.n)
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        # validation, session check and tokenization on a pool thread, never on the engine thread
        ready = await asyncio.to_thread(prepare_chat, engine, req, sessions, sid, tenant.salt, max_tokens)
        schedule = ready.schedule
        gap = ToolGap.from_wire(req.tool_gap) if req.tool_gap is not None else None
        if gap is not None and req.session_id is None:
            raise AKVError("tool_gap: a paused session needs a session_id", field="tool_gap", value=req.tool_gap)
        args = {"messages": req.messages, "schedule": schedule, "prepared": ready.prepared, "max_tokens": max_tokens,
                "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed, "stop": req.stop_list(),
                "ignore_eos": req.ignore_eos, "prefix": req.prefix, "salt": tenant.salt}
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if not req.stream:
            result: ChatResult = await run(new_job(req.timeout, chat=args, session=sid, tool_gap=gap))
            sessions.update(sid, req.messages, schedule)
            metrics.latency.observe(time.perf_counter() - t0)
            message, finish = reply_message(result.text, result.finish_reason, bool(req.tools))
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
            if req.return_token_ids:
                choice["token_ids"] = list(result.token_ids)
            return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": engine.name,
                    "choices": [choice], "usage": usage_json(result.usage)}
        return await stream(req, args, rid, schedule, t0, sid)

    async def stream(req: ChatRequest, args: dict[str, Any], rid: str, schedule: Any, t0: float,
                     sid: str | None) -> Response:
        pieces: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        job = new_job(req.timeout, chat=args, on_text=lambda p: loop.call_soon_threadsafe(pieces.put_nowait, p),
                      session=sid, tool_gap=ToolGap.from_wire(req.tool_gap) if req.tool_gap else None)
        scheduler.submit(job)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": engine.name,
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
                            metrics.ttft.observe(time.perf_counter() - t0)
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
                sessions.update(sid, req.messages, schedule)
                metrics.latency.observe(time.perf_counter() - t0)
                yield chunk({}, result.finish_reason)
                if include_usage:
                    body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": engine.name, "choices": [], "usage": usage_json(result.usage)}
                    yield f"data: {json.dumps(body)}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                if not job.future.done():
                    job.cancel.set()  # the client disconnected mid-stream: stop and free the locks
                if not first.done():
                    first.cancel()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/akv/score", response_model=None)
    async def score(req: ScoreBody, request: Request) -> Any:
        """AKV extension: log-likelihood of each candidate (``Engine.score`` on the worker thread)."""
        salt = tenant_of(request.state).salt
        if req.model is not None and req.model not in names:
            return _error(404, f"model: {req.model!r} is not served here (serving {engine.name!r})",
                          "not_found_error", "model", "model_not_found")
        prepared = await asyncio.to_thread(prepare_score, engine, req, limits, salt)  # 413 before model work
        result = await run(new_job(req.timeout, call=lambda eng: eng.score(req.messages, req.candidates,
                                                                           prepared=prepared)))
        return {"object": "akv.score", "model": engine.name, "candidates": result.candidates,
                "logprobs": result.logprobs, "n_tokens": result.n_tokens, "best": result.best,
                "best_norm": result.best_norm, "usage": usage_json(result.usage)}

    @app.post("/v1/cache/save")
    async def cache_save(req: SaveBody, request: Request) -> dict[str, Any]:
        tenant = tenant_of(request.state)
        schedule = parse_schedule(req.schedule(), n_messages=len(req.messages))
        info = await run(new_job(None, call=lambda eng: store.save(eng, tenant, req.name, req.messages, schedule,
                                                                   overwrite=req.overwrite)))
        return info.as_json()

    @app.post("/v1/cache/load")
    async def cache_load(req: LoadBody, request: Request) -> dict[str, Any]:
        tenant = tenant_of(request.state)
        info = await run(new_job(None, call=lambda eng: store.load(eng, tenant, req.name)))
        return info.as_json()

    return app
