"""``rolling_drop``: the expert policy (keep the last K tool responses' KV) and its generalisations.

Semantics (the public AKV policy at the defaults, K = 12): scanning the messages in order, when the
(K+1)-th newer tool response arrives, the oldest kept one is dropped, with that newer tool
response as the trigger. Reasoning and everything else stay.

Generalisations (each a parameter; the seed ``seeds/rolling_drop.py`` implements the same):

- ``target``: which messages roll: ``tool`` responses, ``assistant`` turns, or ``both`` (each kind
  keeps its own newest K).
- ``trigger``: when drops happen. ``responses``: on the arrival of a target message once its kind
  holds K + ``drop_batch`` kept messages (the oldest beyond K go). ``calls``: at the first message
  after every ``every_calls``-th assistant turn, everything beyond the newest K goes. ``tokens``:
  when the live KV (tokens of undropped messages) passes ``trigger_tokens``, the oldest targets
  beyond the newest K go until it is back to ``target_tokens`` (high / low watermarks).
- ``reposition``: ``never``; ``calls``: at the first message after assistant turn
  ``reposition_start`` and every ``reposition_every`` turns after it, when something was dropped
  since the last reposition; ``tokens``: when the position counter (which keeps growing after
  drops until a reposition compacts it to the live size) passes ``reposition_tokens``.

Every trigger is decided from the messages up to it only, so the schedule is cumulative and stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import as_dict, check_choice, check_range, resolve
from search_spaces.policy import Policy
from search_spaces.program_api import Plan, RequestView
from search_spaces.request import Request

NAME = "rolling_drop"
TARGETS = {"tool": ("tool",), "assistant": ("assistant",), "both": ("tool", "assistant")}
TRIGGERS = ("responses", "calls", "tokens")
REPOSITIONS = ("never", "calls", "tokens")


@dataclass(frozen=True)
class RollingParams:
    """Parameters of ``rolling_drop`` (see the module docstring); defaults are the expert policy."""

    keep_tool_responses: int = 12  # K: newest target messages of each kind that keep their KV
    target: str = "tool"
    trigger: str = "responses"
    drop_batch: int = 1
    every_calls: int = 4
    trigger_tokens: int = 3072
    target_tokens: int = 2048
    reposition: str = "never"
    reposition_start: int = 0
    reposition_every: int = 1
    reposition_tokens: int = 3072

    def __post_init__(self) -> None:
        check_range(NAME, "keep_tool_responses", self.keep_tool_responses, 0, 100_000)
        check_choice(NAME, "target", self.target, tuple(TARGETS))
        check_choice(NAME, "trigger", self.trigger, TRIGGERS)
        check_choice(NAME, "reposition", self.reposition, REPOSITIONS)
        for name in ("drop_batch", "every_calls", "reposition_every", "trigger_tokens", "reposition_tokens"):
            check_range(NAME, name, getattr(self, name), 1, 10_000_000)
        check_range(NAME, "reposition_start", self.reposition_start, 0, 100_000)
        check_range(NAME, "target_tokens", self.target_tokens, 0, self.trigger_tokens - 1)


def rolling_plan(view: RequestView, p: RollingParams) -> Plan:
    """The cumulative plan for ``view`` (the reference implementation of the family)."""
    plan = Plan()
    kinds = TARGETS[p.target]
    k = p.keep_tool_responses
    queues: dict[str, list[int]] = {kind: [] for kind in kinds}
    live = pos = 0
    gap = False
    for m in view.messages:
        t = m.index
        live += m.tokens
        pos += m.tokens
        kind = m.role if m.role in kinds else ""
        if kind:
            queues[kind].append(t)
        victims: list[int] = []
        if p.trigger == "responses":
            if kind and len(queues[kind]) >= k + p.drop_batch:
                q = queues[kind]
                victims = q[: len(q) - k]
                queues[kind] = q[len(q) - k:]
        elif p.trigger == "calls":
            if view.is_call_start(t) and view.calls_before(t) % p.every_calls == 0:
                for name in kinds:
                    q = queues[name]
                    cut = max(0, len(q) - k)
                    victims += q[:cut]
                    queues[name] = q[cut:]
        elif live > p.trigger_tokens:
            eligible = sorted(i for name in kinds for i in queues[name][: max(0, len(queues[name]) - k)])
            remaining = live
            for i in eligible:
                if remaining <= p.target_tokens:
                    break
                victims.append(i)
                remaining -= view.tokens[i]
            for name in kinds:
                queues[name] = [i for i in queues[name] if i not in victims]
        if victims:
            plan.drop(t, victims)
            live -= sum(view.tokens[i] for i in victims)
            gap = True
        if gap and _reposition_due(view, p, t, pos):
            plan.reposition(t)
            pos = live
            gap = False
    return plan


def _reposition_due(view: RequestView, p: RollingParams, t: int, pos: int) -> bool:
    if p.reposition == "calls":
        c = view.calls_before(t)
        return view.is_call_start(t) and c >= p.reposition_start and (c - p.reposition_start) % p.reposition_every == 0
    if p.reposition == "tokens":
        return pos > p.reposition_tokens
    return False


class RollingDrop(Policy):
    """The ``rolling_drop`` family (see the module docstring)."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        self.p = resolve(RollingParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> dict[str, Any]:
        return rolling_plan(request.view(), self.p).wire()


def space(trial: Any) -> dict[str, Any]:
    """Optuna search space of ``rolling_drop`` (conditional parameters are drawn only when used)."""
    params: dict[str, Any] = {
        "keep_tool_responses": trial.suggest_int("keep_tool_responses", 1, 32),
        "target": trial.suggest_categorical("target", list(TARGETS)),
        "trigger": trial.suggest_categorical("trigger", list(TRIGGERS)),
        "reposition": trial.suggest_categorical("reposition", list(REPOSITIONS)),
    }
    if params["trigger"] == "responses":
        params["drop_batch"] = trial.suggest_int("drop_batch", 1, 8)
    elif params["trigger"] == "calls":
        params["every_calls"] = trial.suggest_int("every_calls", 1, 16)
    else:
        params["trigger_tokens"] = trial.suggest_int("trigger_tokens", 512, 8192, log=True)
        ratio = trial.suggest_float("target_ratio", 0.3, 0.95)
        params["target_tokens"] = int(params["trigger_tokens"] * ratio)
    if params["reposition"] == "calls":
        params["reposition_start"] = trial.suggest_int("reposition_start", 0, 16)
        params["reposition_every"] = trial.suggest_int("reposition_every", 1, 16)
    elif params["reposition"] == "tokens":
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
