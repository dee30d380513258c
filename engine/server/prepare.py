"""Request preparation off the engine thread: validation, tokenization and length checks.

The engine runs on one worker thread (``engine.server.scheduler``); everything a request needs
that does not touch the radix tree or the model (normalizing messages, parsing the schedule,
checking the session, tokenizing, replaying the event history, the context-length and score
limits, cheapest first: a prompt too long by its message count or its length in bytes is refused
before tokenizing) runs here instead, on a pool thread (``asyncio.to_thread``), so that a huge or hopeless
request is refused without stalling other clients. The engine thread gets an
:class:`engine.results.Prepared` and starts at the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.decode import SamplingParams
from engine.engine import Engine
from engine.errors import MessageError
from engine.results import Prepared
from engine.schedule import Schedule, parse_schedule
from engine.server.limits import ServerLimits
from engine.server.schemas import ChatRequest, ScoreRequest
from engine.server.sessions import Sessions
from engine.window import ContextWindow


@dataclass(frozen=True)
class PreparedChat:
    """A chat request ready for the engine thread.

    Attributes:
        schedule: the parsed cumulative schedule (the session is updated with it on success).
        prepared: the tokenized, replayed history (``Engine.start(prepared=...)``).
    """

    schedule: Schedule
    prepared: Prepared


def _schedule(window: ContextWindow, messages: list, body: dict, prefix: str, extra_tokens: int) -> Schedule:
    """Parse the schedule, refuse what cannot fit the window (cheap checks first), check messages."""
    if not messages:
        raise MessageError("messages: must be a non-empty list", field="messages", value=[])
    schedule = parse_schedule(body, n_messages=len(messages))
    window.check_fits(len(messages), schedule, extra_tokens)  # 100k messages: 413 before touching them
    window.check_prompt_fits(messages, schedule, prefix, extra_tokens)  # a 3 MB prompt: 413 before tokenizing
    return schedule


def check_early(window: ContextWindow, req: ChatRequest | ScoreRequest, limits: ServerLimits) -> Schedule:
    """Every refusal of a parsed chat or score request that needs no tokenizing, cheapest first:
    sampling values or the candidate count, the schedule, the window by message count and by text
    length. The server's intake process runs it too (``engine.server.intake``).

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), too many candidates
            or a prompt beyond the context window (413).
    """
    if isinstance(req, ChatRequest):
        SamplingParams(req.new_tokens(), req.temperature, req.top_p, req.seed,  # fail fast, before tokenizing
                       min_tokens=req.min_tokens)
        return _schedule(window, req.messages, req.schedule(), req.reply_prefix(), req.new_tokens())
    limits.check_candidates(len(req.candidates))
    return _schedule(window, req.messages, req.schedule(), req.prefix, 1)


def prepare_chat(engine: Engine, req: ChatRequest, sessions: Sessions, session: str | None, salt: str | None,
                 limits: ServerLimits) -> PreparedChat:
    """Validate and tokenize a chat request (any thread but the engine's).

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), an edited session
            history (400), a prompt plus ``max_tokens`` beyond the context window (413).
    """
    schedule = check_early(engine.window, req, limits)
    sessions.check(session, req.messages, schedule)
    prepared = engine.prepare(req.messages, schedule, prefix=req.reply_prefix(), salt=salt,
                              extra_tokens=req.new_tokens())
    return PreparedChat(schedule, prepared)


def prepare_score(engine: Engine, req: ScoreRequest, limits: ServerLimits, salt: str | None) -> Prepared:
    """Validate and tokenize a score request, within ``limits`` (any thread but the engine's).

    Raises:
        RequestError: too many candidates, or too many candidate tokens (413), before any model work.
        AKVError subclasses: bad messages, schedule or candidates (400), too long a prompt (413).
    """
    schedule = check_early(engine.window, req, limits)
    prepared = engine.prepare(req.messages, schedule, prefix=req.prefix, candidates=req.candidates, salt=salt)
    limits.check_score_tokens(prepared.scored_tokens)
    return prepared
