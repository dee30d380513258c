"""The Policy interface: one object for user-written, built-in, evolved and exported policies.

A policy turns a :class:`Request` into a validated :class:`Decision`, turn by turn. Subclasses
implement :meth:`Policy.propose`; this base class fills optional inputs (token counts, intent
relevance), validates every proposal (``decision.py``) and offers the convenience forms. It does
not know how any family decides, nor how programs are sandboxed (``program.py``).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.layout import Renderer
from search_spaces.cache.decision import Decision, cache_decision, text_decision
from search_spaces.cache.embed import Embedder, default_embedder, intent_relevance
from search_spaces.cache.request import Episode, PolicyKind, Request

TokenCounter = Callable[[Sequence[Mapping[str, Any]]], list[int]]


def default_token_counts(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Tokens per message under gemma-3-270m's tokenizer and the ``gemma`` template, for the
    convenience forms called without counts (evaluations pass the evaluating engine's own counts)."""
    return Renderer.for_model("gemma-3-270m", "gemma").render(list(messages)).message_tokens


@dataclass(frozen=True)
class TextProposal:
    """What a text baseline proposes: the rewritten messages and how they were made."""

    messages: list[dict[str, Any]]
    meta: dict[str, Any]


class Policy(abc.ABC):
    """A policy: history in, cumulative cache schedule (or rewritten text) out.

    Contract:
        - :meth:`decide_request` never mutates its request and returns a :class:`Decision` that
          passed :func:`engine.parse_schedule` against the request's message count and extends
          ``request.previous``; otherwise it raises :class:`DecisionError`.
        - Cache policies are cumulative and stable: the decision for ``messages[:m]`` restricted to
          triggers below ``n`` equals the decision for ``messages[:n]``.
        - Text policies (``kind == "text"``) are pure functions of the message list, so the text
          they produce at turn ``n`` extends the text of turn ``n-1`` unless they summarize anew.

    Attributes:
        name: the registry name (``"program"`` for program policies).
        kind: ``"cache"`` or ``"text"``.
    """

    name: str = "policy"
    kind: PolicyKind = PolicyKind.CACHE

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder

    @property
    @abc.abstractmethod
    def params(self) -> dict[str, Any]:
        """The resolved parameters (a fresh dict)."""

    @property
    def needs_relevance(self) -> bool:
        """Whether decisions use ``request.relevance`` (then it is computed when missing)."""
        return False

    @abc.abstractmethod
    def propose(self, request: Request) -> Mapping[str, Any] | TextProposal:
        """The raw decision for ``request``: a wire dict (cache) or a :class:`TextProposal` (text)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.params!r})"

    def relevance_for(self, messages: Sequence[Mapping[str, Any]]) -> tuple[float, ...]:
        """Similarity of each message to the first user message (embeddings cached per text)."""
        return intent_relevance(messages, self._embedder or default_embedder())

    def _complete(self, request: Request) -> Request:
        if self.needs_relevance and request.relevance is None:
            return dataclasses.replace(request, relevance=self.relevance_for(request.messages))
        return request

    def decide_request(self, request: Request) -> Decision:
        """Decide on one request (see the class contract).

        Raises:
            DecisionError: the proposal breaks the wire-format rules or rewrites ``request.previous``.
        """
        request = self._complete(request)
        raw = self.propose(request)
        if self.kind is PolicyKind.TEXT:
            assert isinstance(raw, TextProposal), "text policies propose a TextProposal"
            return text_decision(raw.messages, raw.meta, request)
        return cache_decision(raw, request)

    def run_episodes(self, episodes: Sequence[Episode],
                     on_episode: Callable[[int, tuple[Decision, ...]], None] | None = None,
                     ) -> list[tuple[Decision, ...]]:
        """Decide every request of every episode, each request carrying the previous decision
        (``on_episode(e, decisions)``: called as each episode is decided)."""
        out = []
        for e, episode in enumerate(episodes):
            if self.needs_relevance and episode.relevance is None:
                episode = dataclasses.replace(episode, relevance=self.relevance_for(episode.messages))
            decisions: list[Decision] = []
            for n in episode.cuts:
                prev = decisions[-1] if decisions else None
                request = episode.request(n, prev.wire if prev else None, prev.n_messages if prev else 0)
                decisions.append(self.decide_request(request))
            out.append(tuple(decisions))
            if on_episode is not None:
                on_episode(e, out[-1])
        return out

    def run_episode(self, messages: Sequence[Mapping[str, Any]], *, token_counts: Sequence[int] | None = None,
                    cuts: Sequence[int] | None = None, relevance: Sequence[float] | None = None,
                    ) -> tuple[Decision, ...]:
        """Decide at every request point of one trajectory (default cuts: ``request_points``)."""
        counts = list(token_counts) if token_counts is not None else default_token_counts(messages)
        return self.run_episodes([Episode.of(messages, counts, cuts, relevance)])[0]

    def decide(self, messages: Sequence[Mapping[str, Any]], *, token_counts: Sequence[int] | None = None,
               relevance: Sequence[float] | None = None, previous: Mapping[str, Any] | None = None,
               previous_messages: int = 0) -> dict[str, Any]:
        """The wire-format decision for ``messages`` (token counts from the default counter unless
        given; pass the same counts an exported module uses to get the same decisions)."""
        counts = list(token_counts) if token_counts is not None else default_token_counts(messages)
        request = Request.of(messages, counts, previous=previous, previous_messages=previous_messages,
                             relevance=relevance)
        return self.decide_request(request).wire

    @staticmethod
    def from_program(source: str, params: Mapping[str, Any] | None = None, **options: Any) -> Policy:
        """A policy running program ``source`` (in the sandbox) with ``params``; see ``program.py``."""
        from search_spaces.cache.program import ProgramPolicy

        return ProgramPolicy(source, params or {}, **options)
