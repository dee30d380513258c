"""``lru`` -- the engine's default: paused sessions' KV is ordinary cache, evicted least recently used.

No parameters. Every paused session is KEEP with no score, which makes the survival layer order
eviction exactly as the radix tree does without it (``engine.survival.policy.LRUSurvival`` is the
same rule, used when no policy is named).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.survival.api import SurvivalView
from search_spaces.survival.common import SurvivalFamily

NAME = "lru"


@dataclass(frozen=True)
class LRUParams:
    """No parameters."""


def decide(view: SurvivalView, p: LRUParams) -> dict[str, dict[str, Any]]:
    return {s.session: view.decision("keep", None, None) for s in view.sessions}


def space(trial: Any) -> dict[str, Any]:
    return {}


FAMILY = SurvivalFamily(NAME, "least recently used (the engine's default)", LRUParams, decide, space,
                        "keep paused KV as ordinary cache; evict least recently used first")
