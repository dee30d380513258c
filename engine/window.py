"""The context window's refusals: those that need no tokenizing (a request that cannot fit, told
by its message count or its text's length: ``engine.tokenbound``) and the exact one over a
replayed history.

:class:`ContextWindow` holds only the window and a renderer, so that the server can make the same
decisions outside the engine (on a pool thread, or in its intake process: ``engine.server.intake``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import ContextLengthError
from engine.history import History
from engine.layout import Renderer
from engine.request import Request, RequestState
from engine.schedule import Schedule


@dataclass(frozen=True)
class ContextWindow:
    """Refusals against a window of ``max_context`` positions, rendering through ``renderer``."""

    max_context: int
    renderer: Renderer

    def check_reach(self, reach: int, extra: int, *, at_least: bool = False) -> None:
        """Refuse ``reach`` positions plus ``extra`` beyond the window; ``at_least``: ``reach`` is a
        lower bound (same error, the message says so)."""
        if reach + extra > self.max_context:
            how = "at least position" if at_least else "position"
            raise ContextLengthError(
                f"the prompt reaches {how} {reach} and asks for {extra} more tokens, beyond the "
                f"context window of {self.max_context}", field="messages", value=reach + extra)

    def check_history(self, history: History, extra: int) -> None:
        """Refuse ``history`` (a replayed request) when it cannot grow by ``extra`` positions: the
        exact check, by the furthest position it reaches."""
        self.check_reach(int(max(history.compute_pos.max(initial=-1) + 1, history.next_pos)), extra)

    def check_fits(self, n_messages: int, schedule: Schedule, extra_tokens: int = 0) -> None:
        """Refuse, before any tokenizing, a request that cannot fit the context window.

        Without repositions positions only grow and every message renders to at least one token,
        so ``n_messages + extra_tokens`` positions are a lower bound (with repositions there is none).

        Raises:
            ContextLengthError: the bound is beyond the window.
        """
        if not schedule.repositions:
            self.check_reach(n_messages, extra_tokens)

    def check_prompt_fits(self, messages: Sequence[Any], schedule: Schedule, prefix: str = "",
                          extra_tokens: int = 0) -> None:
        """Check every message's shape and refuse, before tokenizing, a prompt whose length alone
        proves it cannot fit the window (milliseconds for a 3 MB prompt that takes seconds to tokenize).

        Without repositions the prompt reaches at least as many positions as it has tokens, and
        the tokenizer's length bound (``engine.tokenbound``; none for a tokenizer that may drop
        input) never exceeds their number, so only a request that would be refused after
        tokenizing is refused here, with the same error.

        Raises:
            MessageError: a malformed message (as ``Engine.prepare`` would raise).
            ContextLengthError: the bound plus ``extra_tokens`` is beyond the window.
        """
        floor = self.renderer.min_tokens(messages, prefix)
        if floor is not None and not schedule.repositions:
            self.check_reach(floor, extra_tokens, at_least=True)

    def screen(self, request: Request) -> None:
        """The refusals of a ``NEW`` request that need no tokenizing, cheapest first
        (:meth:`check_fits`, then :meth:`check_prompt_fits`, the reply's ``max_tokens`` added);
        the request is ``SCREENED`` after.

        Raises:
            MessageError: a malformed message.
            ContextLengthError: a bound beyond the window.
        """
        extra = request.sampling.max_tokens
        self.check_fits(len(request.messages), request.schedule, extra)  # 100k messages: 413 before touching them
        self.check_prompt_fits(request.messages, request.schedule, request.reply_prefix, extra)  # a 3 MB prompt
        request.advance(RequestState.SCREENED)
