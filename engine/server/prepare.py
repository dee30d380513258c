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
:class:`engine.results.Prepared`.
"""

from __future__ import annotations

from engine.engine import Engine
from engine.errors import MessageError
from engine.request import Request
from engine.results import Prepared
from engine.sampling import SamplingParams
from engine.schedule import Schedule, parse_schedule
from engine.server.limits import ServerLimits
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


def chat_request(req: ChatRequest, window: ContextWindow, salt: str | None = None) -> Request:
    """The request object of a validated chat body, screened by ``window`` (no tokenizing), in the
    order of the checks: the request's tools onto message 0 (``engine.template.attach_tools``),
    sampling values (with the template's stop strings after the request's), ``tool_choice``,
    messages and schedule, the window by message count and by text length.

    Raises:
        AKVError subclasses: bad tools, sampling values, ``tool_choice``, messages or schedule
            (400), a prompt beyond the context window (413).
    """
    messages = attach_tools(req.messages, req.tools)  # rendered in the system turn where the template does
    sampling = SamplingParams(req.new_tokens(), req.temperature, req.top_p, req.seed,
                              tuple(req.stop_list()) + tuple(window.renderer.template.stop), req.ignore_eos,
                              req.min_tokens)
    opening = forced_opening(req.tool_choice, req.tools)
    request = Request(messages, _schedule(messages, req.schedule()), sampling, req.prefix, req.tool_choice,
                      req.tools, opening, salt)
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


def prepare_chat(engine: Engine, req: ChatRequest, sessions: Sessions, session: str | None, salt: str | None,
                 limits: ServerLimits) -> Request:
    """The request of a chat body, made and prepared (any thread but the engine's): screened
    (:func:`chat_request`), its session history checked, tokenized and replayed, its prompt plus
    ``max_tokens`` checked against the window (``Engine.prepare_request``). ``limits`` bound score
    requests only.

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), an edited session
            history (400), a prompt plus ``max_tokens`` beyond the context window (413).
    """
    request = chat_request(req, engine.window, salt)
    sessions.check(session, request.messages, request.schedule)
    return engine.prepare_request(request)


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
