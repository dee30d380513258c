"""One chat request from intake to reply: the object every layer passes on (nano-vllm's ``Sequence``).

The server builds a :class:`Request` once, on a pool thread, from the validated HTTP body
(``engine.server.prepare.chat_request``); :meth:`engine.engine.Engine.chat` and ``start`` build one
from their arguments (:meth:`Request.of`). The same object then crosses to the engine thread in the
scheduler's job, goes to :meth:`engine.engine.Engine.start_request`, rides in the decoder's
:class:`engine.results.Generation`, and is finished there. Its sampling options are built once
(:class:`engine.sampling.SamplingParams`), its schedule parsed once, and the context window is
checked once (:meth:`engine.engine.Engine.prepare_request`); nothing downstream re-derives them.

Not for: the generation's working state (decode cache, tokens so far: ``Generation``), nor the
HTTP shapes (``engine.server.schemas``), nor how the server tracks sessions and tool gaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from engine.grammar import ReplyGrammar, reply_grammar
from engine.sampling import SamplingParams
from engine.schedule import Schedule, parse_schedule
from engine.toolcalls import forced_opening, message_tools

if TYPE_CHECKING:
    from engine.grammar import GrammarMatcher
    from engine.history import Item
    from engine.results import Prepared
    from engine.served_policy import PolicyReport


class RequestState(Enum):
    """Where a request is in its life. Each state follows the one before; ``SCREENED`` is skipped by
    callers that tokenize anyway (in-process ``Engine.chat``)."""

    NEW = "new"
    """Options checked, sampling built, schedule parsed."""
    SCREENED = "screened"
    """Passed the window's bounds that need no tokenizing (by message count, by text length)."""
    PREPARED = "prepared"
    """Tokenized and replayed (``prepared`` is set); the exact context-length check passed."""
    RUNNING = "running"
    """Prefilled: a ``Generation`` advances it token by token."""
    FINISHED = "finished"
    """Its KV stored, its locks released, its result made."""


_FOLLOWS = {
    RequestState.SCREENED: (RequestState.NEW,),
    RequestState.PREPARED: (RequestState.NEW, RequestState.SCREENED),
    RequestState.RUNNING: (RequestState.PREPARED,),
    RequestState.FINISHED: (RequestState.RUNNING,),
}


@dataclass(eq=False)
class Request:
    """A chat request. Every field but ``prepared``, ``matcher`` and ``state`` is fixed when it is built.

    Attributes:
        messages: OpenAI-style messages (the request's tools already on message 0, where the
            template renders them: ``engine.template.attach_tools``).
        schedule: the parsed cumulative cache schedule.
        sampling: how tokens are picked; ``sampling.stop`` holds the caller's stop strings and
            the template's.
        prefix: text the caller's reply starts with (not part of the text returned).
        tool_choice: OpenAI's ``tool_choice`` (``engine.interface.ChatOptions``).
        tools: the declared tool specs (the request's, or message 0's).
        opening: ``tool_choice``'s forced opening over ``tools`` (``engine.toolcalls.forced_opening``):
            the reply starts with it, and the text returned includes it.
        grammar: what the reply after ``opening`` must match (``engine.grammar.reply_grammar``: a
            required tool call, or ``response_format``'s JSON), ``None`` for free text.
        salt: the tenant's cache namespace (``engine.history.Salt``), ``None`` for the shared one.
        prepared: the tokenized, replayed history, once ``PREPARED``.
        matcher: ``grammar`` compiled for the engine's tokenizer, once ``PREPARED``
            (``engine.grammar.GrammarCompiler``); the decoder masks the reply's tokens with it.
        state: the lifecycle (:class:`RequestState`), advanced by :meth:`advance`.
        policy: for a request that named a served policy (``MODEL@NAME``), how its schedule was
            made (``engine.served_policy.PolicyReport``); ``None`` otherwise.
    """

    messages: Sequence[Any]
    schedule: Schedule
    sampling: SamplingParams
    prefix: str = ""
    tool_choice: str | dict[str, Any] | None = None
    tools: Sequence[Any] | None = None
    opening: str = ""
    salt: str | None = None
    grammar: ReplyGrammar | None = None
    prepared: Prepared | None = None
    matcher: GrammarMatcher | None = None
    state: RequestState = RequestState.NEW
    policy: PolicyReport | None = None

    @classmethod
    def of(cls, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None,
           options: Mapping[str, Any], template_stop: Sequence[str] = ()) -> Request:
        """The request of ``Engine.chat``'s arguments: options checked and sampling built (with
        ``template_stop`` after the caller's stop strings), ``tool_choice`` over message 0's tools,
        its grammar (``tool_choice`` and ``response_format``), the schedule parsed. ``on_text`` and
        ``cancelled`` are accepted and left to the caller.

        Raises:
            TypeError: an option that is not a :class:`engine.interface.ChatOptions` key.
            AKVError subclasses: a bad sampling value, ``tool_choice``, schema or schedule (in that order).
        """
        sampling = SamplingParams.of(options, template_stop)
        tools = message_tools(messages)
        tool_choice = options.get("tool_choice")
        opening = forced_opening(tool_choice, tools)
        grammar = reply_grammar(tool_choice, tools, options.get("response_format"))
        return cls(messages, parse_schedule(schedule), sampling, options.get("prefix", ""), tool_choice, tools,
                   opening, options.get("salt"), grammar)

    @property
    def reply_prefix(self) -> str:
        """What the reply's tokens follow: the caller's prefix, then the forced opening."""
        return self.prefix + self.opening

    @property
    def items(self) -> list[Item]:
        """The prepared event history (salt, message tokens and events, the reply prefix's tokens)."""
        assert self.prepared is not None, f"a {self.state.value} request is not prepared"
        return self.prepared.items

    def advance(self, state: RequestState, prepared: Prepared | None = None) -> None:
        """Move to ``state`` (``prepared`` with ``PREPARED``); an out-of-order move is a bug (assert)."""
        assert self.state in _FOLLOWS[state], f"a {self.state.value} request cannot become {state.value}"
        assert (prepared is not None) == (state is RequestState.PREPARED)
        if prepared is not None:
            self.prepared = prepared
        self.state = state
