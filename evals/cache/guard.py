"""The frame guard: a policy's drops wait until the agent has read what they drop.

A replayed trajectory is fixed text and its probes ask about facts, so the replay evaluator cannot
see two harms a live agent would suffer: a tool output (or user message) dropped before the next
assistant turn has read it, so the agent never saw it; and a dropped system prompt or task, so
the agent loses its instructions. Neither costs a probe. Under the guard
(``EvalConfig.frame_guard``, ``akv eval --frame-guard``, a search's ``eval.frame_guard``) every
decision is changed before it is accounted or asked:

- a drop of a message that is not the assistant's waits for the first assistant message after it
  (trigger ``max(t, read)``: the message leaves once that assistant message has been processed, so
  that turn attended to it); until that assistant message is part of the request, the drop is not
  made;
- the frame (system and developer messages, and the first user message) is never dropped;
- drops of assistant messages, of reasoning parts, and repositions are kept as decided.

Each drop's new trigger depends only on the message and its old trigger, so the guarded schedules
of a policy's requests still extend one another. Not for text rewrites (summaries): those are
passed through unchanged. The rule itself is ``search_spaces.cache.frame_guard``, which exported
policy modules carry too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.schedule import DropTarget, Schedule, parse_schedule
from search_spaces.cache.decision import Decision
from search_spaces.cache.frame_guard import FrameGuard

__all__ = ["FrameGuard", "GuardedPolicy", "guard_decisions", "guard_schedule"]


def guard_schedule(schedule: Schedule, guard: FrameGuard, n_messages: int) -> Schedule:
    """``schedule`` (a request of ``n_messages`` messages; ``guard`` over the roles of the whole
    trajectory or of the request) under the guard: see the module docstring."""
    if not schedule.drops:
        return schedule
    table: dict[int, list[DropTarget]] = {}
    for t, targets in schedule.drops:
        for d in targets:
            when = guard.trigger(d.message, t, n_messages)
            if when is not None:
                table.setdefault(when, []).append(d)
    drops = tuple((t, tuple(sorted(set(ds), key=lambda d: d.sort_key))) for t, ds in sorted(table.items()))
    return Schedule(drops, schedule.repositions)


def guard_decisions(messages: Sequence[Mapping[str, Any]], decisions: Mapping[int, Decision | None],
                    ) -> dict[int, Decision | None]:
    """Each cache decision of ``decisions`` (cut -> decision over ``messages``' prefix) guarded;
    text decisions and ``None`` unchanged."""
    guard = FrameGuard([str(m.get("role", "")) for m in messages])
    out: dict[int, Decision | None] = {}
    for n, d in decisions.items():
        if d is None or d.schedule is None:
            out[n] = d
            continue
        guarded = guard_schedule(d.schedule, guard, d.n_messages)
        out[n] = d if guarded == d.schedule else replace(d, schedule=guarded)
    return out


class GuardedPolicy:
    """``policy`` with every decision guarded, for a live episode (``akv live --run`` of a run
    searched under the guard): ``decide(messages)`` gives the wire-format schedule for ``messages``."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        wire = self.policy.decide(messages)
        n = len(messages)
        guarded = guard_schedule(parse_schedule(wire, n), FrameGuard([str(m.get("role", "")) for m in messages]), n)
        return guarded.to_wire()
