"""Request preparation off the engine thread: validation, tokenization and length checks.

The engine runs on one worker thread (``engine.server.scheduler``); everything a request needs
that does not touch the radix tree or the model (normalizing messages, parsing the schedule,
checking the session, tokenizing, replaying the event history, the context-length and score
limits, cheapest first: a prompt too long by its message count or its length in bytes is refused
before tokenizing) runs here instead, on a pool thread (``asyncio.to_thread``), so that a huge or hopeless
request is refused without stalling other clients. The engine thread gets an
:class:`engine.engine.Prepared` and starts at the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.decode import SamplingParams
from engine.engine import Engine, Prepared
from engine.errors import MessageError
from engine.schedule import Schedule, parse_schedule
from engine.server.limits import ServerLimits
from engine.server.schemas import ChatRequest, ScoreRequest
from engine.server.sessions import Sessions


@dataclass(frozen=True)
class PreparedChat:
    """A chat request ready for the engine thread.

    Attributes:
        schedule: the parsed cumulative schedule (the session is updated with it on success).
        prepared: the tokenized, replayed history (``Engine.start(prepared=...)``).
    """

    schedule: Schedule
    prepared: Prepared


def _schedule(engine: Engine, messages: list, body: dict, prefix: str, extra_tokens: int) -> Schedule:
    """Parse the schedule, refuse what cannot fit the window (cheap checks first), check messages."""
    if not messages:
        raise MessageError("messages: must be a non-empty list", field="messages", value=[])
    schedule = parse_schedule(body, n_messages=len(messages))
    engine.check_fits(len(messages), schedule, extra_tokens)  # 100k messages: 413 before touching them
    engine.check_prompt_fits(messages, schedule, prefix, extra_tokens)  # a 3 MB prompt: 413 before tokenizing
    return schedule


def prepare_chat(engine: Engine, req: ChatRequest, sessions: Sessions, session: str | None, salt: str | None,
                 max_tokens: int) -> PreparedChat:
    """Validate and tokenize a chat request (any thread but the engine's).

    Raises:
        AKVError subclasses: bad sampling values, messages or schedule (400), an edited session
            history (400), a prompt plus ``max_tokens`` beyond the context window (413).
    """
    SamplingParams(max_tokens, req.temperature, req.top_p, req.seed)  # fail fast, before tokenizing
    schedule = _schedule(engine, req.messages, req.schedule(), req.prefix, max_tokens)
    sessions.check(session, req.messages, schedule)
    prepared = engine.prepare(req.messages, schedule, prefix=req.prefix, salt=salt, extra_tokens=max_tokens)
    return PreparedChat(schedule, prepared)


def prepare_score(engine: Engine, req: ScoreRequest, limits: ServerLimits, salt: str | None) -> Prepared:
    """Validate and tokenize a score request, within ``limits`` (any thread but the engine's).

    Raises:
        RequestError: too many candidates, or too many candidate tokens (413), before any model work.
        AKVError subclasses: bad messages, schedule or candidates (400), too long a prompt (413).
    """
    limits.check_candidates(len(req.candidates))
    schedule = _schedule(engine, req.messages, req.schedule(), req.prefix, 1)
    prepared = engine.prepare(req.messages, schedule, prefix=req.prefix, candidates=req.candidates, salt=salt)
    limits.check_score_tokens(prepared.scored_tokens)
    return prepared
