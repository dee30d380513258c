"""``intent`` -- IntentKV stand-in: keep the sessions whose context serves their task's intent.

IntentKV keeps a session-level memory of the task's intent and scores history by attention
against it; its exact formula was not found (SURVIVAL.md). **Stand-in, labelled as such:** a
session's relevance is the similarity of its recent context to its task statement, computed by
the harness (``evals.survival`` uses a bag-of-words cosine; ``search_spaces.cache.embed`` offers
MiniLM embeddings), and taken at session level::

    score = relevance - w_size * min(1, tokens / size_max)

(lower evicted first; a session without a relevance gets ``neutral``). Sessions below
``discard_below`` are discarded at once, below ``swap_below`` swapped (0 = never).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import check_range
from search_spaces.survival.api import SurvivalView
from search_spaces.survival.common import SurvivalFamily, resident_bytes

NAME = "intent"


@dataclass(frozen=True)
class IntentParams:
    neutral: float = 0.5
    w_size: float = 0.0
    size_max_tokens: int = 32768
    swap_below: float = 0.0
    discard_below: float = 0.0

    def __post_init__(self) -> None:
        check_range(NAME, "neutral", self.neutral, 0.0, 1.0)
        check_range(NAME, "w_size", self.w_size, -10.0, 10.0)
        check_range(NAME, "size_max_tokens", self.size_max_tokens, 1, 10_000_000)
        check_range(NAME, "swap_below", self.swap_below, 0.0, 1.0)
        check_range(NAME, "discard_below", self.discard_below, 0.0, 1.0)


def decide(view: SurvivalView, p: IntentParams) -> dict[str, dict[str, Any]]:
    out = {}
    host = view.host_free()
    for s in view.sessions:
        relevance = s.relevance if s.relevance is not None else p.neutral
        score = relevance - p.w_size * min(1.0, s.context_tokens / p.size_max_tokens)
        size = resident_bytes(view, s)
        if relevance < p.discard_below:
            out[s.session] = view.decision("discard", None, score)
        elif relevance < p.swap_below and 0 < size <= host:
            out[s.session] = view.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = view.decision("keep", None, score)
    return out


def space(trial: Any) -> dict[str, Any]:
    return {
        "neutral": trial.suggest_float("neutral", 0.0, 1.0),
        "w_size": trial.suggest_float("w_size", -1.0, 1.0),
        "swap_below": trial.suggest_float("swap_below", 0.0, 1.0),
        "discard_below": trial.suggest_float("discard_below", 0.0, 0.5),
    }


FAMILY = SurvivalFamily(NAME, "IntentKV (session intent; bag-of-words similarity stand-in)", IntentParams,
                        decide, space, "evict sessions whose context is least relevant to their task first")
