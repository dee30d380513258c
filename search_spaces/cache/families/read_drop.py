"""``read_drop``: the best hand-written rule, read off what the searches keep finding.

Two rules over tool responses, checked at every message ``t`` (the trigger) for each tool response
``i <= t`` still attended:

- *read*: ``i`` has at least ``min_tokens`` tokens and at least ``read_after`` assistant turns came
  after it, up to and including ``t`` (the agent has read it);
- *superseded* (with ``supersede``): a later tool response, at or before ``t``, answers the same
  call (same tool, same arguments: ``request.superseded_by``), so ``i`` is a stale copy.

Either rule drops ``i`` at ``t``. Nothing else is ever dropped, and positions are never compacted.
Every decision reads only messages up to its trigger, so the schedule is cumulative and stable.
The searches' evolved programs and the hindsight rule table mostly drop read tool output above a
length and stale re-reads (docs/notebook.md); this family is that idea in three parameters, so an
evolved program has to beat the simplest rule an engineer would write from the same observation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.cache.policy import Policy
from search_spaces.cache.program_api import Plan, RequestView
from search_spaces.cache.request import Request
from search_spaces.params import as_dict, check_range, resolve

NAME = "read_drop"


@dataclass(frozen=True)
class ReadDropParams:
    """Parameters of ``read_drop``.

    Attributes:
        read_after: assistant turns after a tool response before it may be dropped (0: as it arrives).
        min_tokens: tool responses shorter than this are kept unless superseded.
        supersede: also drop a tool response once a later one answers the same call.
    """

    read_after: int = 1
    min_tokens: int = 256
    supersede: bool = True

    def __post_init__(self) -> None:
        check_range(NAME, "read_after", self.read_after, 0, 100_000)
        check_range(NAME, "min_tokens", self.min_tokens, 0, 10_000_000)


def read_drop_plan(view: RequestView, p: ReadDropParams) -> Plan:
    """The cumulative plan for ``view`` (the reference implementation of the family)."""
    plan = Plan()
    attended: list[int] = []
    for m in view.messages:
        t = m.index
        if m.is_tool:
            attended.append(t)
        turns = view.calls_before(t + 1)
        gone = [i for i in attended
                if (view.tokens[i] >= p.min_tokens and turns - view.calls_before(i + 1) >= p.read_after)
                or (p.supersede and 0 <= view.superseded_by(i) <= t)]
        plan.drop(t, gone)
        attended = [i for i in attended if i not in gone]
    return plan


class ReadDrop(Policy):
    """The ``read_drop`` family (see the module docstring)."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        self.p = resolve(ReadDropParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> dict[str, Any]:
        return read_drop_plan(request.view(), self.p).wire()


def space(trial: Any) -> dict[str, Any]:
    """Optuna search space of ``read_drop``."""
    return {"read_after": trial.suggest_int("read_after", 0, 8),
            "min_tokens": trial.suggest_int("min_tokens", 8, 4096, log=True),
            "supersede": trial.suggest_categorical("supersede", [True, False])}
