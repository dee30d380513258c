"""``next_ref`` -- UNISON-style survival scores: estimated next-reference distance from a shared log.

Belady's rule (evict what is used furthest in the future) is the oracle; this family uses the
published practical form (SURVIVAL.md, "Next-reference-distance scoring")::

    p_evict = a * min(1, idle / tau_max) + b * (1 - P_reuse) + c * min(1, tokens / size_max)

evicting the largest (score = -p_evict). ``idle`` is the time the session has waited; P_reuse
the probability that it resumes within ``horizon_s``, estimated from the shared event log's
pause durations (``common.reuse_probability``: the empirical CDF conditioned on the time
waited, the harness's estimate when given, an exponential cold start otherwise). Because the
score changes as a session waits, ``rescore_s > 0`` re-scores it periodically. Sessions whose
p_evict reaches ``swap_above`` are swapped at once (host room permitting), ``discard_above``
discarded (100 = never).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import check_range
from search_spaces.survival.api import SessionView, SurvivalView
from search_spaces.survival.common import SurvivalFamily, resident_bytes, reuse_probability

NAME = "next_ref"


@dataclass(frozen=True)
class UnisonParams:
    a: float = 0.4
    b: float = 0.4
    c: float = 0.2
    tau_max_s: float = 30.0
    horizon_s: float = 5.0
    size_max_tokens: int = 32768
    min_observations: int = 20
    cold_mean_s: float = 1.0
    rescore_s: float = 0.0
    swap_above: float = 100.0
    discard_above: float = 100.0

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            check_range(NAME, name, getattr(self, name), 0.0, 100.0)
        check_range(NAME, "tau_max_s", self.tau_max_s, 1e-6, 1e7)
        check_range(NAME, "horizon_s", self.horizon_s, 0.0, 1e7)
        check_range(NAME, "size_max_tokens", self.size_max_tokens, 1, 10_000_000)
        check_range(NAME, "min_observations", self.min_observations, 1, 1_000_000)
        check_range(NAME, "cold_mean_s", self.cold_mean_s, 1e-6, 1e6)
        check_range(NAME, "rescore_s", self.rescore_s, 0.0, 1e6)
        check_range(NAME, "swap_above", self.swap_above, 0.0, 100.0)
        check_range(NAME, "discard_above", self.discard_above, 0.0, 100.0)


def p_evict(view: SurvivalView, s: SessionView, p: UnisonParams) -> float:
    reuse = reuse_probability(view, s, p.horizon_s, p.min_observations, p.cold_mean_s)
    return (p.a * min(1.0, s.waited_s / p.tau_max_s) + p.b * (1.0 - reuse)
            + p.c * min(1.0, s.context_tokens / p.size_max_tokens))


def decide(view: SurvivalView, p: UnisonParams) -> dict[str, dict[str, Any]]:
    out = {}
    host = view.host_free()
    ttl = p.rescore_s if p.rescore_s > 0 else None
    for s in view.sessions:
        pe = p_evict(view, s, p)
        size = resident_bytes(view, s)
        if pe >= p.discard_above:
            out[s.session] = view.decision("discard", None, -pe)
        elif pe >= p.swap_above and 0 < size <= host:
            out[s.session] = view.decision("swap", None, -pe)
            host -= size
        else:
            out[s.session] = view.decision("keep", ttl, -pe)
    return out


def space(trial: Any) -> dict[str, Any]:
    return {
        "a": trial.suggest_float("a", 0.0, 1.0),
        "b": trial.suggest_float("b", 0.0, 1.0),
        "c": trial.suggest_float("c", 0.0, 1.0),
        "tau_max_s": trial.suggest_float("tau_max_s", 0.5, 600.0, log=True),
        "horizon_s": trial.suggest_float("horizon_s", 0.1, 120.0, log=True),
        "rescore_s": trial.suggest_categorical("rescore_s", [0.0, 0.5, 2.0, 10.0]),
        "swap_above": trial.suggest_float("swap_above", 0.0, 3.0),
        "discard_above": trial.suggest_float("discard_above", 0.0, 3.0),
    }


FAMILY = SurvivalFamily(NAME, "UNISON-style next-reference-distance survival scores (Belady estimate)",
                        UnisonParams, decide, space, "evict by estimated next-reference distance from the event log")
