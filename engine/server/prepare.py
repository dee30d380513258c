"""Request preparation off the engine thread: the request object, validation, tokenization and
length checks.

The engine runs on one worker thread (``engine.server.scheduler``); everything a request needs
that does not touch the radix tree or the model (normalizing messages, building its sampling
options, parsing the schedule, checking the session, tokenizing, replaying the event history, the
context-length and score limits, cheapest first: a prompt too long by its message count or its
length in bytes is refused before tokenizing) runs here instead, on a pool thread
(``asyncio.to_thread``), so that a huge or hopeless request is refused without stalling other
clients. A chat's :class:`engine.request.Request` is made here, once, from the validated body, and
reaches the engine thread ``PREPARED``; a score request reaches it as an
:class:`engine.results.Prepared`. A chat that names a served policy (``MODEL@NAME``) gets the
policy's schedule here too, from the served model's token counts (:func:`with_policy`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from engine.engine import Engine
from engine.errors import AKVError, MessageError, show
from engine.grammar import reply_grammar
from engine.layout import Renderer
from engine.request import Request
from engine.results import Prepared
from engine.sampling import SamplingParams
from engine.schedule import EMPTY, Schedule, parse_schedule
from engine.served_policy import PolicyOutcome, PolicyReport, ServedPolicy
from engine.server.limits import ServerLimits
from engine.server.policies import Policies, one_line
from engine.server.schemas import ChatRequest, ScoreRequest
from engine.server.sessions import Sessions
from engine.template import attach_tools
from engine.toolcalls import forced_opening
from engine.window import ContextWindow


def _schedule(messages: list, body: dict) -> Schedule:
    """Check that there are messages and parse the schedule against their number."""
    if not messages:
        raise MessageError("messages: must be a non-empty list", field="messages", value=[])
    return parse_schedule(body, n_messages=len(messages))


def check_fields(req: ChatRequest, policy: ServedPolicy | None, model: str) -> None:
    """The chat route's refusals of a body's fields, before any request object is made: schedule
    fields with a served policy's model (it gives the schedule), ``n`` other than 1, and fields of
    ``engine.server.schemas.UNSUPPORTED`` set. ``model``: the served model's name (for the message).

    Raises:
        AKVError: the first refusal (400).
    """
    if policy is not None:
        sent = next((k for k, v in req.schedule().items() if v is not None), None)
        if sent is not None:
            raise AKVError(f"{sent}: model {req.model!r} gets its schedule from policy {policy.name!r}; send no "
                           f"schedule fields with it (or name model {model!r} and send your own)",
                           field=sent, value=req.model)
    if req.n != 1:
        raise AKVError(f"n: only n=1 is supported, got {req.n}", field="n", value=req.n)
    unsupported = req.unsupported()
    if unsupported is not None:
        name, value = unsupported
        raise AKVError(f"{name}: not supported by this server, got {show(value)} (leave it unset: the reply "
                       "would ignore it)", field=name, value=value)


def build_chat(req: ChatRequest, template_stop: Sequence[str], salt: str | None = None) -> Request:
    """The request object of a validated chat body, unscreened, in the order of the checks: the
    request's tools onto message 0 (``engine.template.attach_tools``), sampling values (with
    ``template_stop`` after the request's stop strings), ``tool_choice``, the reply's grammar
    (``tool_choice`` and ``response_format``: ``engine.grammar.reply_grammar``), messages and schedule.

    Raises:
        AKVError subclasses: bad tools, sampling values, ``tool_choice``, schemas, messages or
            schedule (400).
    """
    messages = attach_tools(req.messages, req.tools)  # rendered in the system turn where the template does
    sampling = SamplingParams(req.new_tokens(), req.temperature, req.top_p, req.seed,
                              tuple(req.stop_list()) + tuple(template_stop), req.ignore_eos, req.min_tokens)
    opening = forced_opening(req.tool_choice, req.tools)
    grammar = reply_grammar(req.tool_choice, req.tools, req.response_format)
    return Request(messages, _schedule(messages, req.schedule()), sampling, req.prefix, req.tool_choice,
                   req.tools, opening, salt, grammar)


def chat_request(req: ChatRequest, window: ContextWindow, salt: str | None = None) -> Request:
    """The request object of a validated chat body (:func:`build_chat`), screened by ``window`` (no
    tokenizing): by message count and by text length.

    Raises:
        AKVError subclasses: bad tools, sampling values, ``tool_choice``, messages or schedule
            (400), a prompt beyond the context window (413).
    """
    request = build_chat(req, window.renderer.template.stop, salt)
    window.screen(request)
    return request


def check_early(window: ContextWindow, req: ChatRequest | ScoreRequest, limits: ServerLimits) -> None:
    """Every refusal of a parsed chat or score request that needs no tokenizing, cheapest first:
    for a chat, :func:`chat_request`'s; for a score request, the candidate count, the schedule, the
    window by message count and by text length. The server's intake process runs it
    (``engine.server.intake``).

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), too many candidates
            or a prompt beyond the context window (413).
    """
    if isinstance(req, ChatRequest):
        chat_request(req, window)
    else:
        _score_schedule(window, req, limits)


def _score_schedule(window: ContextWindow, req: ScoreRequest, limits: ServerLimits) -> Schedule:
    limits.check_candidates(len(req.candidates))
    schedule = _schedule(req.messages, req.schedule())
    window.check_fits(len(req.messages), schedule, 1)
    window.check_prompt_fits(req.messages, schedule, req.prefix, 1)
    return schedule


@dataclasses.dataclass(frozen=True)
class PolicyStep:
    """The served policy a chat named (``MODEL@NAME``) and the app's :class:`Policies` that run it."""

    policies: Policies
    policy: ServedPolicy


def prepare_chat(engine: Engine, req: ChatRequest, sessions: Sessions, session: str | None, salt: str | None,
                 limits: ServerLimits, policy: PolicyStep | None = None) -> Request:
    """The request of a chat body, made and prepared (any thread but the engine's): screened
    (:func:`chat_request`), given ``policy``'s schedule (:func:`with_policy`), its session history
    checked, tokenized and replayed, its prompt plus ``max_tokens`` checked against the window
    (``Engine.prepare_request``). ``limits`` bound score requests only. A schedule of ``policy``
    that the engine refuses serves the request with the full cache (``refused`` in its report).

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), an edited session
            history (400), a prompt plus ``max_tokens`` beyond the context window (413).
    """
    request = chat_request(req, engine.window, salt)
    if policy is None:
        sessions.check(session, request.messages, request.schedule)
        return engine.prepare_request(request)
    request = with_policy(engine, request, policy, sessions, session)
    try:
        sessions.check(session, request.messages, request.schedule)
        return engine.prepare_request(request)
    except AKVError as err:
        if err.transient or err.status != 400 or not request.schedule:
            raise
        fallback = without_drops(policy.policy.name, sessions, session, PolicyOutcome.REFUSED,
                                 f"the engine refused the schedule: {err}")
    refused = dataclasses.replace(request, schedule=fallback.schedule, policy=fallback.report)
    sessions.check(session, refused.messages, refused.schedule)
    return engine.prepare_request(refused)


def with_policy(engine: Engine, request: Request, step: PolicyStep, sessions: Sessions, session: str | None,
                ) -> Request:
    """``request`` (screened, no schedule of its own) with the schedule ``step.policy`` computes from
    its messages and their token counts under ``engine``'s renderer, and the report
    (``request.policy``): :func:`policy_schedule`.

    Raises:
        AKVError subclasses: the messages cannot be rendered (the caller's mistake, 400).
    """
    decided = policy_schedule(engine.renderer, request.messages, step, sessions, session)
    return dataclasses.replace(request, schedule=decided.schedule, policy=decided.report)


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """The schedule a served policy gave one request, and how it was made."""

    schedule: Schedule
    report: PolicyReport


def policy_schedule(renderer: Renderer, messages: Sequence[Any], step: PolicyStep, sessions: Sessions,
                    session: str | None) -> Scheduled:
    """The schedule ``step.policy`` computes for ``messages`` (the request's tools on message 0) from
    their token counts under ``renderer``, with its report. A failure serves the policy's fallback;
    with none, the session's last schedule (``session``), else no drops. The server
    (:func:`with_policy`) and the proxy (``engine.server.proxy``) both decide here.

    Raises:
        AKVError subclasses: the messages cannot be rendered (the caller's mistake, 400).
    """
    counts = renderer.render(messages).message_tokens
    decided = step.policies.decide(step.policy, list(messages), counts)
    report = decided.report
    if decided.wire is None:
        if report.ok:
            return Scheduled(EMPTY, report)
        return without_drops(report.name, sessions, session, report.outcome, report.reason)
    try:
        schedule = parse_schedule(decided.wire, n_messages=len(messages))
    except AKVError as err:
        return without_drops(report.name, sessions, session, PolicyOutcome.REFUSED,
                             f"the engine refused the schedule: {err}")
    return Scheduled(schedule, report)


def without_drops(name: str, sessions: Sessions, session: str | None, outcome: PolicyOutcome,
                  reason: str) -> Scheduled:
    """Policy ``name``'s failure served with no new drops: the session's last schedule, or the full cache."""
    last = sessions.schedule_of(session)
    report = PolicyReport(name, outcome, one_line(reason), "previous" if last else "full")
    return Scheduled(last or EMPTY, report)


def prepare_score(engine: Engine, req: ScoreRequest, limits: ServerLimits, salt: str | None) -> Prepared:
    """Validate and tokenize a score request, within ``limits`` (any thread but the engine's).

    Raises:
        RequestError: too many candidates, or too many candidate tokens (413), before any model work.
        AKVError subclasses: bad messages, schedule or candidates (400), too long a prompt (413).
    """
    schedule = _score_schedule(engine.window, req, limits)
    prepared = engine.prepare(req.messages, schedule, prefix=req.prefix, candidates=req.candidates, salt=salt)
    limits.check_score_tokens(prepared.scored_tokens)
    return prepared
