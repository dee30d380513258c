"""What the engine returns and keeps: the plain records of a request and of the engine's counters.

- :class:`ChatResult` (:meth:`engine.engine.Engine.chat` / ``finish``) with its :class:`Timings`;
- :class:`ScoreResult` (``score`` / ``score_many``: candidates' log-likelihoods);
- :class:`Prepared` (``prepare``: a request tokenized and replayed ahead of the engine thread);
- :class:`Generation` (``start``: a chat request in flight, which ``step`` advances; the request
  itself is :class:`engine.request.Request`);
- :class:`EngineStats` (counters since start, for /metrics).

They hold data only (no model, no tree), so that the remote engine, the server and the evaluators
can name them without loading the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from engine.cache.plan import TokenUsage
    from engine.cache.radix import Node
    from engine.decode import DecodeCache, Sampler
    from engine.grammar import GrammarMatcher
    from engine.history import History, Item
    from engine.layout import Layout
    from engine.request import Request


@dataclass(frozen=True)
class Timings:
    """Wall-clock seconds of one request's phases."""

    prefill_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s


@dataclass(frozen=True)
class ChatResult:
    """Outcome of :meth:`engine.engine.Engine.chat`.

    Attributes:
        text: the generated text (stop string excluded).
        token_ids: the generated token ids.
        usage: token accounting (``engine.cache.plan.TokenUsage``).
        finish_reason: ``"stop"`` (end token or stop string), ``"length"`` or ``"cancelled"``.
    """

    text: str
    token_ids: list[int]
    usage: TokenUsage
    finish_reason: str
    timings: Timings


@dataclass(frozen=True)
class ScoreResult:
    """Log-likelihood of candidate continuations (lm-evaluation-harness conventions).

    Attributes:
        candidates: the candidate strings, in order.
        logprobs: sum of each continuation's token log-probabilities.
        n_tokens: tokens of each continuation.
    """

    candidates: list[str]
    logprobs: list[float]
    n_tokens: list[int]
    usage: TokenUsage

    @property
    def best(self) -> int:
        """Index of the highest-scoring candidate (``acc``)."""
        return int(np.argmax(self.logprobs))

    @property
    def best_norm(self) -> int:
        """Index of the best score per character (``acc_norm``)."""
        return int(np.argmax([lp / max(1, len(c)) for lp, c in zip(self.logprobs, self.candidates)]))


@dataclass(frozen=True)
class Prepared:
    """A request tokenized and replayed ahead of the engine thread (:meth:`engine.engine.Engine.prepare`).

    Attributes:
        layout: the rendered messages and compiled schedule.
        items: the event history: salt, message tokens and events, then the prefix's tokens.
        history: ``replay(items)``.
        candidates: score candidates (empty for a chat request).
        continuations: each candidate's tokens.
    """

    layout: Layout
    items: list[Item]
    history: History
    candidates: tuple[str, ...] = ()
    continuations: tuple[list[int], ...] = ()

    @property
    def scored_tokens(self) -> int:
        """Tokens of all candidates together (what scoring computes beyond the prompt)."""
        return sum(len(c) for c in self.continuations)


@dataclass(eq=False)
class Generation:
    """An in-flight chat request between :meth:`engine.engine.Engine.start` and :meth:`engine.engine.Engine.finish`.

    ``request`` is the request itself (its sampling options, opening and prepared history);
    ``hidden`` is the last-layer state after the newest token; ``tokens`` the generated ids;
    ``grammar`` the request's matcher (``Request.matcher``) where its reply is constrained.
    """

    request: Request
    usage: TokenUsage
    end: Node
    cache: DecodeCache
    sampler: Sampler
    hidden: torch.Tensor
    next_pos: int
    on_text: Callable[[str], None] | None
    cancelled: Callable[[], bool] | None
    t_start: float
    t_decode: float
    grammar: GrammarMatcher | None = None
    tokens: list[int] = field(default_factory=list)
    emitted: str = ""
    reason: str | None = None
    done: bool = False
    finished: bool = False

    @property
    def items(self) -> list[Item]:
        """The prompt's event history (``request.items``)."""
        return self.request.items


@dataclass
class EngineStats:
    """Counters since start (for /metrics)."""

    requests: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    drop_skipped_tokens: int = 0
    repos_tokens: int = 0
    completion_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def add(self, usage: TokenUsage, timings: Timings) -> None:
        self.requests += 1
        self.prompt_tokens += usage.prompt_tokens
        self.prefill_tokens += usage.prefill_tokens
        self.cached_tokens += usage.cached_tokens
        self.drop_skipped_tokens += usage.drop_skipped_tokens
        self.repos_tokens += usage.repos_tokens
        self.completion_tokens += usage.completion_tokens
        self.prefill_seconds += timings.prefill_s
        self.decode_seconds += timings.decode_s
