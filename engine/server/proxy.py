"""The AKV proxy: policies served by model name in front of any server that speaks the wire format.

``akv proxy --upstream URL --model M --policy NAME=SPEC`` answers the OpenAI API as ``akv serve
--policy`` does, without a model of its own: a chat for ``M@NAME`` gets the schedule that policy
``NAME`` computes from its messages, with ``M``'s token counts (its tokenizer and template, no
weights), decided exactly as the server decides it (``engine.server.prepare.policy_schedule``:
the same policy runner, time limit and fallbacks), and is forwarded to the upstream (``akv serve``,
an AKV/SGLang server on GPUs) as a chat for ``M`` with the wire-format fields (``drop_message``,
``reposition``, or ``drop_rule`` for part drops). The upstream's reply comes back as it streams,
its usage passed through, with ``model`` said back as ``M@NAME``, ``usage.akv_policy`` added (in a
stream: to the usage chunk, which comes with ``stream_options.include_usage``) and the
``X-AKV-Policy`` header. A schedule the upstream refuses (a 400 about a schedule field) is sent
again without new drops, ``refused`` in the report, as the server does.

Everything else is forwarded unchanged: a chat for plain ``M`` or any other model, ``/v1/akv/score``
and ``/v1/cache/save|load``; the upstream's status codes, error bodies and ``Retry-After`` reach
the client. The proxy keeps the server's edge: API keys and tenants, per-key limits, the body size
and strict JSON, the server's 400s for a policy model's body, every error as an OpenAI error
object; an upstream that cannot be reached is a 502 (504: no answer in time). ``GET /v1/models``
is the upstream's list plus ``M@NAME``; ``/metrics`` counts requests per policy and outcome and
upstream failures; ``/health`` says whether the upstream answers.

Not for: serving a model (``engine.server.app``), nor the upstream's connection (``engine.server.upstream``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, generate_latest

from engine.layout import Renderer
from engine.served_policy import PolicyOutcome, ServedPolicy
from engine.server.body import parse_object, validate
from engine.server.handlers import install_error_handlers
from engine.server.limits import BodyLimitMiddleware, ServerLimits, install_error_shape
from engine.server.policies import Policies, PolicyCollector
from engine.server.prepare import PolicyStep, Scheduled, build_chat, check_fields, policy_schedule, without_drops
from engine.server.ratelimit import Gate, TenantLimitMiddleware, TenantLimits
from engine.server.schemas import ChatRequest
from engine.server.served import error_response
from engine.server.sessions import Sessions
from engine.server.tenants import AuthMiddleware, Tenants, tenant_of
from engine.server.upstream import Upstream, UpstreamError, chunks, is_stream, passed_headers, relay

CHAT = "/v1/chat/completions"
FORWARDED = ("/v1/akv/score", "/v1/cache/save", "/v1/cache/load")
"""Routes forwarded as they come (no policy serves them)."""
SCHEDULE_FIELDS = frozenset({"drop_message", "reposition", "drop_rule", "cache"})


@dataclass
class Proxy:
    """What the proxy's routes share.

    Attributes:
        model: the upstream's model name (``M``; a chat for ``M@NAME`` is forwarded as ``M``).
        renderer: ``M``'s tokenizer and template (the policies' token counts).
        sessions: the schedule each ``session_id`` was last forwarded with (a failing policy's
            fallback, as the server's); nothing else of a session is kept here.
    """

    upstream: Upstream
    renderer: Renderer
    model: str
    policies: Policies
    limits: ServerLimits
    sessions: Sessions
    registry: CollectorRegistry
    failures: Counter

    def policy_of(self, model: Any) -> ServedPolicy | None:
        return self.policies.split(model, frozenset({self.model}))[1] if isinstance(model, str) else None


def create_proxy(upstream: Upstream, renderer: Renderer, model: str, *,
                 policies: Policies | Sequence[ServedPolicy] = (), tenants: Tenants | None = None,
                 limits: ServerLimits | None = None, tenant_limits: TenantLimits | None = None) -> FastAPI:
    """The proxy's app (module docstring): ``model`` served by ``upstream``, ``policies`` as ``model@NAME``.

    ``tenants``, ``limits`` (the body size and JSON depth; the intake is not used) and
    ``tenant_limits`` are the server's (``engine.server.app.create_app``).
    """
    policies = policies if isinstance(policies, Policies) else Policies(policies)
    registry = CollectorRegistry()
    registry.register(PolicyCollector(policies))
    failures = Counter("akv_proxy_upstream_failures", "Requests the upstream did not answer (502/504), by code",
                       ["code"], registry=registry)
    proxy = Proxy(upstream, renderer, model, policies, limits or ServerLimits(), Sessions(), registry, failures)
    tenants = tenants if tenants is not None else Tenants()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await upstream.aclose()
            policies.close()

    app = FastAPI(title="AKV proxy", lifespan=lifespan)
    app.state.proxy = proxy
    app.state.tenants = tenants
    app.state.limits = proxy.limits
    app.state.gate = Gate(tenant_limits or TenantLimits())
    app.add_middleware(BodyLimitMiddleware, max_bytes=proxy.limits.max_body_bytes)
    install_error_shape(app)
    app.add_middleware(TenantLimitMiddleware, gate=app.state.gate)
    app.add_middleware(AuthMiddleware, tenants=tenants)
    install_error_handlers(app)

    @app.exception_handler(UpstreamError)
    async def _upstream(request: Request, exc: UpstreamError) -> JSONResponse:
        proxy.failures.labels(exc.code).inc()
        return error_response(exc.status, str(exc), "timeout_error" if exc.status == 504 else "server_error",
                              None, exc.code)

    _routes(app, proxy)
    return app


def _routes(app: FastAPI, p: Proxy) -> None:
    @app.post(CHAT, response_model=None)
    async def chat(request: Request) -> Response:
        raw = await request.body()
        body = await asyncio.to_thread(parse_object, raw, p.limits.max_json_depth)
        policy = p.policy_of(body.get("model"))
        auth = request.headers.get("authorization")
        if policy is None:  # not ours: as it came
            return relay(p.upstream, await p.upstream.open("POST", CHAT, content=raw, authorization=auth))
        return await _policy_chat(p, request, body, policy, auth)

    for path in FORWARDED:
        app.add_api_route(path, _forward(p, path), methods=["POST"], response_model=None)

    @app.get("/v1/models", response_model=None)
    async def models(request: Request) -> Response:
        response = await p.upstream.open("GET", "/v1/models", authorization=request.headers.get("authorization"))
        raw = await p.upstream.read(response)
        if response.status_code != 200:
            return Response(raw, response.status_code, headers=passed_headers(response))
        listed = json.loads(raw)
        listed["data"] = [*listed.get("data", []), *({"id": m, "object": "model", "created": 0, "owned_by": "akv-rsi"}
                                                    for m in p.policies.model_ids(p.model))]
        return JSONResponse(listed)

    @app.get("/health", response_model=None)
    async def health() -> Response:
        try:
            status = (await p.upstream.client.get(p.upstream.url + "/health", timeout=5.0)).status_code
        except httpx.HTTPError:
            status = None
        ok = status == 200
        return JSONResponse({"status": "ok" if ok else "upstream_unavailable", "model": p.model,
                             "upstream": p.upstream.url, "upstream_status": status, "policies": p.policies.names},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(p.registry), media_type="text/plain; version=0.0.4")


def _forward(p: Proxy, path: str) -> Any:
    """The route that forwards ``path`` as it came."""

    async def forward(request: Request) -> Response:
        content = await request.body()
        return relay(p.upstream, await p.upstream.open("POST", path, content=content,
                                                       authorization=request.headers.get("authorization")))

    return forward


async def _policy_chat(p: Proxy, request: Request, body: dict[str, Any], policy: ServedPolicy,
                       auth: str | None) -> Response:
    """A chat for ``M@NAME``: the server's checks, the policy's schedule, forwarded (module docstring)."""
    req = validate(body, ChatRequest)
    check_fields(req, policy, p.model)
    chat = build_chat(req, p.renderer.template.stop)  # the server's 400s, in its order
    sid = tenant_of(request.state).session_key(req.session_id)
    step = PolicyStep(p.policies, policy)
    decided = await asyncio.to_thread(policy_schedule, p.renderer, chat.messages, step, p.sessions, sid)
    response = await _send(p, body, decided, auth)
    if response.status_code == 400 and not decided.schedule.is_empty:
        raw = await p.upstream.read(response)
        refusal = _schedule_refusal(raw)
        fallback = without_drops(policy.name, p.sessions, sid, PolicyOutcome.REFUSED,
                                 f"the upstream refused the schedule: {refusal}")
        if refusal is None or fallback.schedule == decided.schedule:
            return Response(raw, 400, headers=passed_headers(response))  # the caller's mistake, not the schedule's
        decided = fallback
        response = await _send(p, body, decided, auth)
    p.policies.count(decided.report)
    if response.status_code != 200:
        return relay(p.upstream, response)
    p.sessions.update(sid, chat.messages, decided.schedule)
    headers = passed_headers(response, {"X-AKV-Policy": decided.report.header})
    if is_stream(response):
        return StreamingResponse(_rewritten(p, response, body["model"], decided), headers=headers)
    reply = json.loads(await p.upstream.read(response))
    _rewrite(reply, body["model"], decided)
    return JSONResponse(reply, headers={k: v for k, v in headers.items() if k != "content-type"})


async def _send(p: Proxy, body: dict[str, Any], decided: Scheduled, auth: str | None) -> httpx.Response:
    forwarded = {k: v for k, v in body.items() if k not in SCHEDULE_FIELDS} | {"model": p.model}
    return await p.upstream.open("POST", CHAT, content=json.dumps(forwarded | decided.schedule.to_wire()).encode(),
                                 authorization=auth)


def _schedule_refusal(raw: bytes) -> str | None:
    """The upstream's message when its 400 is about a schedule field (``None``: about something else)."""
    try:
        error = json.loads(raw)["error"]
        param = str(error.get("param") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    head = param.split(".")[0].split("[")[0]
    return str(error.get("message", "")) if head in SCHEDULE_FIELDS else None


def _rewrite(reply: Any, model: str, decided: Scheduled) -> None:
    """A reply (or stream chunk) of the upstream as the server says it: the client's model name,
    ``usage.akv_policy`` where there is usage."""
    if not isinstance(reply, dict):
        return
    if "model" in reply:
        reply["model"] = model
    if isinstance(reply.get("usage"), dict):
        reply["usage"]["akv_policy"] = decided.report.to_json()


async def _rewritten(p: Proxy, response: httpx.Response, model: str, decided: Scheduled) -> AsyncIterator[bytes]:
    """The upstream's stream, line by line, each ``data:`` event rewritten (:func:`_rewrite`)."""
    pending = b""
    async for chunk in chunks(p.upstream, response):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            yield b"".join(_line(line, model, decided) + b"\n" for line in lines)
    if pending:
        yield _line(pending, model, decided)


def _line(line: bytes, model: str, decided: Scheduled) -> bytes:
    if not line.startswith(b"data: ") or line == b"data: [DONE]":
        return line
    try:
        event = json.loads(line[6:])
    except ValueError:
        return line
    _rewrite(event, model, decided)
    return b"data: " + json.dumps(event).encode()
