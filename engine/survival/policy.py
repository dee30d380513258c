"""The survival-policy interface, and the default policy (LRU: exactly what the engine did before).

Built-in policies from the literature (Continuum, InferCept, Autellix, UNISON, IntentKV, the
four-axis score) and survival *programs* live in ``search_spaces.survival``; the engine only needs
this protocol, so it depends on nothing outside ``engine``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from engine.survival.types import KEEP, SurvivalDecision, SurvivalRequest


@runtime_checkable
class SurvivalPolicy(Protocol):
    """Decides what happens to paused sessions' KV.

    ``decide`` returns one decision per session of ``request.pending``, keyed by session id; it
    must not mutate anything the engine owns. It may raise an ``AKVError`` (a program that
    failed raises ``search_spaces.ProgramFailure``); the manager then records the failure.
    ``close`` releases resources (a sandbox process); calling it twice is harmless.
    """

    name: str

    def decide(self, request: SurvivalRequest) -> Mapping[str, SurvivalDecision]: ...

    def close(self) -> None: ...


class LRUSurvival:
    """``lru``: keep every paused session's KV as ordinary cache, evicted least-recently-used first.

    With this policy the engine behaves exactly as without a survival layer.
    """

    name = "lru"

    def decide(self, request: SurvivalRequest) -> dict[str, SurvivalDecision]:
        return {s.session: KEEP for s in request.pending}

    def close(self) -> None:
        return None
