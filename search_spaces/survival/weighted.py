"""``weighted`` -- the four-axis survival score, with weights that adapt to the workload.

Mature designs weigh recompute cost, expected gap, reference distance and intent relevance
(docs/survival.md). Each axis is put in [0, 1]::

    cost   = T_fwd(C) / (T_fwd(C) + ref_cost_s)              recompute cost (keep the costly)
    gap    = R / (R + ref_gap_s)                              R = expected remaining pause
    ref    = 1 - P_reuse(horizon_s)                           estimated next-reference distance
    intent = relevance (``neutral_intent`` when unknown)      intent stand-in (see ``intent``)
    score  = W_cost*cost - W_gap*gap - W_ref*ref + W_intent*intent        (lower evicted first)

with ``W_k = w_k + m_k_pressure * pressure + m_k_slow * slow``, where pressure = pool used /
pool budget and slow = the share of logged pauses longer than 1 s: the weights follow the
workload (memory pressure, tool mix). R and P_reuse come from ``common`` (harness estimate,
empirical CDF of the shared log, or a cold-start exponential). Actions: score >= ``pin_above``
pins for R seconds; below ``discard_below`` discards; below ``swap_below`` swaps (host room
permitting); otherwise KEEP, re-scored every ``rescore_s`` when positive. Defaults leave the
thresholds off (+-100).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import as_dict, check_range
from search_spaces.survival.api import SurvivalView
from search_spaces.survival.common import SurvivalFamily, expected_remaining, resident_bytes, reuse_probability

NAME = "weighted"
AXES = ("cost", "gap", "ref", "intent")
FEATURES = ("pressure", "slow")


@dataclass(frozen=True)
class WeightedParams:
    w_cost: float = 1.0
    w_gap: float = 1.0
    w_ref: float = 1.0
    w_intent: float = 0.5
    m_cost_pressure: float = 0.0
    m_cost_slow: float = 0.0
    m_gap_pressure: float = 0.0
    m_gap_slow: float = 0.0
    m_ref_pressure: float = 0.0
    m_ref_slow: float = 0.0
    m_intent_pressure: float = 0.0
    m_intent_slow: float = 0.0
    ref_cost_s: float = 1.0
    ref_gap_s: float = 5.0
    horizon_s: float = 5.0
    min_observations: int = 20
    cold_mean_s: float = 1.0
    neutral_intent: float = 0.5
    pin_above: float = 100.0
    swap_below: float = -100.0
    discard_below: float = -100.0
    rescore_s: float = 0.0

    def __post_init__(self) -> None:
        for name, value in as_dict(self).items():
            if name.startswith(("w_", "m_")):
                check_range(NAME, name, value, -100.0, 100.0)
        check_range(NAME, "ref_cost_s", self.ref_cost_s, 1e-6, 1e6)
        check_range(NAME, "ref_gap_s", self.ref_gap_s, 1e-6, 1e6)
        check_range(NAME, "horizon_s", self.horizon_s, 0.0, 1e7)
        check_range(NAME, "min_observations", self.min_observations, 1, 1_000_000)
        check_range(NAME, "cold_mean_s", self.cold_mean_s, 1e-6, 1e6)
        check_range(NAME, "neutral_intent", self.neutral_intent, 0.0, 1.0)
        for name in ("pin_above", "swap_below", "discard_below"):
            check_range(NAME, name, getattr(self, name), -100.0, 100.0)
        check_range(NAME, "rescore_s", self.rescore_s, 0.0, 1e6)


def weights(view: SurvivalView, p: WeightedParams) -> dict[str, float]:
    pressure = min(1.0, max(0.0, view.pressure()))
    durations = view.all_durations
    slow = sum(1 for d in durations if d > 1.0) / len(durations) if durations else 0.0
    values = as_dict(p)
    return {a: values["w_" + a] + values["m_" + a + "_pressure"] * pressure + values["m_" + a + "_slow"] * slow
            for a in AXES}


def decide(view: SurvivalView, p: WeightedParams) -> dict[str, dict[str, Any]]:
    w = weights(view, p)
    out = {}
    host = view.host_free()
    ttl = p.rescore_s if p.rescore_s > 0 else None
    for s in view.sessions:
        t_fwd = view.t_fwd(s.context_tokens)
        rest = expected_remaining(view, s, p.min_observations, p.cold_mean_s)
        cost = t_fwd / (t_fwd + p.ref_cost_s)
        gap = rest / (rest + p.ref_gap_s)
        ref = 1.0 - reuse_probability(view, s, p.horizon_s, p.min_observations, p.cold_mean_s)
        intent = s.relevance if s.relevance is not None else p.neutral_intent
        score = w["cost"] * cost - w["gap"] * gap - w["ref"] * ref + w["intent"] * intent
        size = resident_bytes(view, s)
        if score >= p.pin_above:
            out[s.session] = view.decision("pin", rest if rest > 0 else ttl, score)
        elif score < p.discard_below:
            out[s.session] = view.decision("discard", None, score)
        elif score < p.swap_below and 0 < size <= host:
            out[s.session] = view.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = view.decision("keep", ttl, score)
    return out


def space(trial: Any) -> dict[str, Any]:
    params: dict[str, Any] = {f"w_{a}": trial.suggest_float(f"w_{a}", -2.0, 2.0) for a in AXES}
    if trial.suggest_categorical("adaptive", [False, True]):
        for a in AXES:
            for f in FEATURES:
                params[f"m_{a}_{f}"] = trial.suggest_float(f"m_{a}_{f}", -2.0, 2.0)
    params["ref_cost_s"] = trial.suggest_float("ref_cost_s", 0.01, 30.0, log=True)
    params["ref_gap_s"] = trial.suggest_float("ref_gap_s", 0.1, 300.0, log=True)
    params["horizon_s"] = trial.suggest_float("horizon_s", 0.1, 120.0, log=True)
    if trial.suggest_categorical("thresholds", [False, True]):
        params["pin_above"] = trial.suggest_float("pin_above", -2.0, 4.0)
        params["swap_below"] = trial.suggest_float("swap_below", -4.0, 2.0)
        params["discard_below"] = trial.suggest_float("discard_below", -4.0, params["swap_below"])
    return params


FAMILY = SurvivalFamily(NAME, "four-axis score: recompute cost, expected gap, reference distance, intent",
                        WeightedParams, decide, space, "weighted four-axis survival score with adaptive weights")
