"""``thinking_drop``: drop the reasoning (``reasoning_content``) of earlier assistant turns.

Scanning the messages in order, when assistant turn ``j`` arrives, the reasoning of turn
``j - keep_turns`` (if it has any) becomes due; due reasoning is dropped in groups of
``drop_batch``, with the arriving assistant message as the trigger. ``keep_turns = 0`` drops a
turn's reasoning right after the turn itself. Contents, tool calls and tool responses stay. The
schedule uses the wire-format rule ``{"type": "thinking_drop", "drop_messages": {...}}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.cache.policy import Policy
from search_spaces.cache.program_api import Plan, RequestView
from search_spaces.cache.request import Request
from search_spaces.params import as_dict, check_range, resolve

NAME = "thinking_drop"


@dataclass(frozen=True)
class ThinkingParams:
    """Parameters of ``thinking_drop``.

    Attributes:
        keep_turns: how many of the newest assistant turns keep their reasoning.
        drop_batch: how many due reasonings are dropped together (fewer cache events).
    """

    keep_turns: int = 1
    drop_batch: int = 1

    def __post_init__(self) -> None:
        check_range(NAME, "keep_turns", self.keep_turns, 0, 100_000)
        check_range(NAME, "drop_batch", self.drop_batch, 1, 100_000)


def thinking_plan(view: RequestView, p: ThinkingParams) -> Plan:
    """The cumulative plan for ``view`` (the reference implementation of the family)."""
    plan = Plan()
    turns: list[int] = []
    pending: list[int] = []
    for m in view.messages:
        if not m.is_assistant:
            continue
        turns.append(m.index)
        if len(turns) > p.keep_turns:
            old = turns[len(turns) - p.keep_turns - 1]
            if view.messages[old].has_reasoning:
                pending.append(old)
        if len(pending) >= p.drop_batch:
            plan.drop_reasoning(m.index, pending)
            pending = []
    return plan


class ThinkingDrop(Policy):
    """The ``thinking_drop`` family (see the module docstring)."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        self.p = resolve(ThinkingParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> dict[str, Any]:
        return thinking_plan(request.view(), self.p).wire()


def space(trial: Any) -> dict[str, Any]:
    """Optuna search space of ``thinking_drop``."""
    return {"keep_turns": trial.suggest_int("keep_turns", 0, 8), "drop_batch": trial.suggest_int("drop_batch", 1, 4)}
