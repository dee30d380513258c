"""``scored_drop``: when the live KV passes a budget, drop the lowest-scoring messages.

Scanning the messages in order, at every message ``t`` where the live KV (tokens of undropped
messages) exceeds ``budget_tokens``, eligible messages are scored and the lowest go (ties: the
older first) until the live KV is at most ``target_ratio * budget_tokens``. Eligible: not already
dropped, not a system message, not the first user message (the task), not among the newest
``protect_last`` messages, of a role named by ``targets``. Score (higher = keep), all features in
[0, 1] except where noted::

    recency   = (i + 1) / (t + 1)
    cost      = log1p(tokens[i]) / log1p(max tokens so far)        recompute cost
    reference = overlap / (1 + t - last)                            estimated reference distance:
                last = latest message sharing an entity with i, overlap = shared / entities of i
                (0 when nothing referred to i again)
    intent    = relevance[i]   cosine similarity to the first user message (embeddings)
    score     = w_recency*recency + w_cost*cost + w_reference*reference + w_intent*intent

Each weight may follow the workload: ``w_k + m_k_tool_rate*tool_rate + m_k_session*session +
m_k_pressure*pressure``, with tool_rate = tool messages / messages so far, session = assistant
turns / (turns + 10), pressure = live / budget. Intent needs a sentence-embedding model; it is
computed only when ``w_intent`` or an ``m_intent_*`` modifier is nonzero. Optional reposition
when the position counter passes ``reposition_tokens`` (0 = never). The seed
``seeds/scored_drop.py`` implements the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from search_spaces.cache.embed import Embedder
from search_spaces.cache.policy import Policy
from search_spaces.cache.program_api import Plan, RequestView
from search_spaces.cache.request import Request
from search_spaces.params import as_dict, check_choice, check_range, resolve

NAME = "scored_drop"
WEIGHTS = ("recency", "cost", "reference", "intent")
FEATURES = ("tool_rate", "session", "pressure")
TARGET_ROLES = {"tool": ("tool",), "tool_assistant": ("tool", "assistant"), "any": ("tool", "assistant", "user")}
INTENT_PARAMS = ("w_intent", *(f"m_intent_{f}" for f in FEATURES))


@dataclass(frozen=True)
class ScoredParams:
    """Parameters of ``scored_drop`` (see the module docstring)."""

    budget_tokens: int = 2048
    target_ratio: float = 0.75
    protect_last: int = 4
    targets: str = "tool"
    w_recency: float = 1.0
    w_cost: float = -0.25
    w_reference: float = 1.0
    w_intent: float = 0.0
    m_recency_tool_rate: float = 0.0
    m_recency_session: float = 0.0
    m_recency_pressure: float = 0.0
    m_cost_tool_rate: float = 0.0
    m_cost_session: float = 0.0
    m_cost_pressure: float = 0.0
    m_reference_tool_rate: float = 0.0
    m_reference_session: float = 0.0
    m_reference_pressure: float = 0.0
    m_intent_tool_rate: float = 0.0
    m_intent_session: float = 0.0
    m_intent_pressure: float = 0.0
    reposition_tokens: int = 0

    def __post_init__(self) -> None:
        check_range(NAME, "budget_tokens", self.budget_tokens, 1, 10_000_000)
        check_range(NAME, "target_ratio", self.target_ratio, 0.0, 1.0)
        check_range(NAME, "protect_last", self.protect_last, 0, 100_000)
        check_choice(NAME, "targets", self.targets, tuple(TARGET_ROLES))
        check_range(NAME, "reposition_tokens", self.reposition_tokens, 0, 10_000_000)
        for name, value in as_dict(self).items():
            if name.startswith(("w_", "m_")):
                check_range(NAME, name, value, -100.0, 100.0)


def _weights(values: dict[str, Any], tool_rate: float, session: float, pressure: float) -> list[float]:
    return [values[f"w_{w}"] + values[f"m_{w}_tool_rate"] * tool_rate + values[f"m_{w}_session"] * session
            + values[f"m_{w}_pressure"] * pressure for w in WEIGHTS]


def scored_plan(view: RequestView, p: ScoredParams) -> Plan:
    """The cumulative plan for ``view`` (the reference implementation of the family)."""
    plan = Plan()
    values = as_dict(p)
    roles = TARGET_ROLES[p.targets]
    first_user = next((m.index for m in view.messages if m.is_user), -1)
    target_live = int(p.budget_tokens * p.target_ratio)
    holders: dict[str, list[int]] = {}
    last_ref: dict[int, int] = {}
    overlap: dict[int, float] = {}
    dropped: set[int] = set()
    live = pos = max_tok = n_tool = n_asst = 0
    gap = False
    for m in view.messages:
        t = m.index
        live += m.tokens
        pos += m.tokens
        max_tok = max(max_tok, m.tokens)
        n_tool += 1 if m.is_tool else 0
        n_asst += 1 if m.is_assistant else 0
        common: dict[int, int] = {}
        for e in view.entities(t):
            for i in holders.get(e, []):
                common[i] = common.get(i, 0) + 1
            holders.setdefault(e, []).append(t)
        for i, c in common.items():
            last_ref[i] = t
            overlap[i] = c / len(view.entities(i))
        if live > p.budget_tokens:
            wr, wc, wf, wi = _weights(values, n_tool / (t + 1), n_asst / (n_asst + 10), live / p.budget_tokens)
            scored = []
            for i in range(t - p.protect_last + 1):
                c_m = view.messages[i]
                if i in dropped or i == first_user or c_m.is_system or c_m.role not in roles:
                    continue
                recency = (i + 1) / (t + 1)
                cost = math.log1p(view.tokens[i]) / math.log1p(max_tok) if max_tok > 0 else 0.0
                reference = overlap[i] / (1 + t - last_ref[i]) if i in last_ref else 0.0
                intent = view.relevance[i] if view.relevance is not None else 0.0
                scored.append((wr * recency + wc * cost + wf * reference + wi * intent, i))
            victims = []
            for _, i in sorted(scored):
                if live <= target_live:
                    break
                victims.append(i)
                dropped.add(i)
                live -= view.tokens[i]
            if victims:
                plan.drop(t, victims)
                gap = True
        if p.reposition_tokens > 0 and gap and pos > p.reposition_tokens:
            plan.reposition(t)
            pos = live
            gap = False
    return plan


class ScoredDrop(Policy):
    """The ``scored_drop`` family (see the module docstring).

    Args:
        embedder: computes intent relevance when needed (default: all-MiniLM-L6-v2, loaded lazily).
        **params: :class:`ScoredParams` fields.
    """

    name = NAME

    def __init__(self, embedder: Embedder | None = None, **params: Any) -> None:
        super().__init__(embedder)
        self.p = resolve(ScoredParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    @property
    def needs_relevance(self) -> bool:
        return any(getattr(self.p, name) != 0 for name in INTENT_PARAMS)

    def propose(self, request: Request) -> dict[str, Any]:
        return scored_plan(request.view(), self.p).wire()


def space(trial: Any) -> dict[str, Any]:
    """Optuna search space of ``scored_drop``. The intent term and the workload modifiers are
    switched on by the space-only choices ``use_intent`` and ``use_modifiers``."""
    params: dict[str, Any] = {
        "budget_tokens": trial.suggest_int("budget_tokens", 512, 8192, log=True),
        "target_ratio": trial.suggest_float("target_ratio", 0.3, 0.95),
        "protect_last": trial.suggest_int("protect_last", 0, 12),
        "targets": trial.suggest_categorical("targets", list(TARGET_ROLES)),
        "w_recency": trial.suggest_float("w_recency", -2.0, 2.0),
        "w_cost": trial.suggest_float("w_cost", -2.0, 2.0),
        "w_reference": trial.suggest_float("w_reference", -2.0, 2.0),
    }
    use_intent = trial.suggest_categorical("use_intent", [False, True])
    if use_intent:
        params["w_intent"] = trial.suggest_float("w_intent", 0.0, 2.0)
    if trial.suggest_categorical("use_modifiers", [False, True]):
        for w in WEIGHTS if use_intent else WEIGHTS[:3]:
            for f in FEATURES:
                params[f"m_{w}_{f}"] = trial.suggest_float(f"m_{w}_{f}", -1.0, 1.0)
    if trial.suggest_categorical("reposition", [False, True]):
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
