"""``min_waste`` -- InferCept: per paused request, the least-waste choice among preserve, swap, discard.

Paper rule (SURVIVAL.md, "InferCept"), with C the context tokens, M the KV bytes per token,
T_fwd the recompute time, T_gap the pause estimate and C_other the running batch's tokens::

    W_preserve = T_gap * C * M
    W_discard  = T_fwd(C) * C * M * (1/2 if chunked) + T_fwd(C) * C_other * M
    W_swap     = 2 * T_swap(C_resident * M) * C_other * M

At each decision point the pending requests are sorted by ``min(W_preserve, W_discard)``,
largest first; swap goes to those it saves most for (``W_swap`` below that minimum) while a
per-step swap budget lasts (the bytes one decode step of the running batch can hide, times
``swap_budget_steps``) and the host tier has room; the rest get whichever of preserve / discard
wastes less. Preserve pins the KV and asks again after ``recheck_s`` (the pause estimate grows).
``gap_estimate="waited"`` is the paper's estimator for unknown pauses (the time already waited);
``"expected"`` uses the harness's ``expected_gap_s`` when given. Pinned requests carry score
``T_fwd(C)``, so the cheapest to recompute are unpinned first under pressure.

``gap_estimate="thresholds"`` is the released code's fixed-threshold baseline: preserve below
``preserve_below_s`` (4 s), swap below ``swap_below_s`` (7 s), discard beyond -- applied to the
harness's expected duration when known (the released code reads it from its trace), else as a
chain of decisions over the time waited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import check_choice, check_range
from search_spaces.survival.api import SessionView, SurvivalView
from search_spaces.survival.common import SurvivalFamily, resident_bytes

NAME = "min_waste"


@dataclass(frozen=True)
class InferCeptParams:
    gap_estimate: str = "waited"
    recheck_s: float = 0.5
    chunked: bool = False
    swap_budget_steps: float = 1.0
    preserve_below_s: float = 4.0
    swap_below_s: float = 7.0

    def __post_init__(self) -> None:
        check_choice(NAME, "gap_estimate", self.gap_estimate, ("waited", "expected", "thresholds"))
        check_range(NAME, "recheck_s", self.recheck_s, 1e-3, 1e6)
        check_range(NAME, "swap_budget_steps", self.swap_budget_steps, 0.0, 1e6)
        check_range(NAME, "preserve_below_s", self.preserve_below_s, 0.0, 1e6)
        check_range(NAME, "swap_below_s", self.swap_below_s, self.preserve_below_s, 1e6)


@dataclass(frozen=True)
class Waste:
    """The three wastes of one paused request (byte-seconds)."""

    preserve: float
    discard: float
    swap: float

    @property
    def least(self) -> float:
        return min(self.preserve, self.discard)


def wastes(view: SurvivalView, s: SessionView, p: InferCeptParams) -> Waste:
    m = view.bytes_per_token
    c = s.context_tokens
    gap = s.expected_gap_s if p.gap_estimate == "expected" and s.expected_gap_s is not None else s.waited_s
    t_fwd = view.t_fwd(c)
    preserve = gap * c * m
    discard = t_fwd * c * m * (0.5 if p.chunked else 1.0) + t_fwd * view.running_tokens * m
    swap = 2 * view.t_swap(resident_bytes(view, s)) * view.running_tokens * m
    return Waste(preserve, discard, swap)


def _thresholds(view: SurvivalView, s: SessionView, p: InferCeptParams) -> dict[str, Any]:
    score = view.t_fwd(s.context_tokens)
    if s.expected_gap_s is not None:
        d = s.expected_gap_s
        action = "pin" if d < p.preserve_below_s else "swap" if d < p.swap_below_s else "discard"
        return view.decision(action, None, score if action == "pin" else None)
    w = s.waited_s
    if w < p.preserve_below_s:
        return view.decision("pin", p.preserve_below_s - w, score)
    if w < p.swap_below_s:
        return view.decision("swap", p.swap_below_s - w, None)
    return view.decision("discard", None, None)


def decide(view: SurvivalView, p: InferCeptParams) -> dict[str, dict[str, Any]]:
    if p.gap_estimate == "thresholds":
        return {s.session: _thresholds(view, s, p) for s in view.sessions}
    rows = sorted(((wastes(view, s, p), s) for s in view.sessions), key=lambda r: (-r[0].least, r[1].session))
    per_byte = view.t_swap(1.0)
    budget = p.swap_budget_steps * view.t_decode(max(1, view.running)) / per_byte if per_byte > 0 else 0.0
    host = view.host_free()
    out = {}
    for w, s in rows:
        size = resident_bytes(view, s)
        if 0 < size <= budget and size <= host and w.swap < w.least:
            out[s.session] = view.decision("swap", None, None)
            budget -= size
            host -= size
        elif w.preserve <= w.discard:
            out[s.session] = view.decision("pin", p.recheck_s, view.t_fwd(s.context_tokens))
        else:
            out[s.session] = view.decision("discard", None, None)
    return out


def space(trial: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"gap_estimate": trial.suggest_categorical("gap_estimate",
                                                                         ["waited", "expected", "thresholds"])}
    if params["gap_estimate"] == "thresholds":
        params["preserve_below_s"] = trial.suggest_float("preserve_below_s", 0.1, 30.0, log=True)
        params["swap_below_s"] = params["preserve_below_s"] + trial.suggest_float("swap_after_s", 0.0, 30.0)
    else:
        params["recheck_s"] = trial.suggest_float("recheck_s", 0.05, 10.0, log=True)
        params["chunked"] = trial.suggest_categorical("chunked", [False, True])
        params["swap_budget_steps"] = trial.suggest_float("swap_budget_steps", 0.0, 16.0)
    return params


FAMILY = SurvivalFamily(NAME, "InferCept (intercepted requests: preserve / swap / discard)", InferCeptParams,
                        decide, space, "per request, the least-waste choice among preserve, swap and discard")
