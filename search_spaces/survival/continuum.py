"""``ttl`` -- Continuum: pin a paused program's KV for a TTL chosen from the tool's duration CDF.

Paper rule (SURVIVAL.md, "Continuum"): choose the TTL tau from {0} and the observed durations of
this tool to maximise::

    F(tau) * (queue_delay * eta + reload_cost) - tau

F is the empirical CDF of the tool's durations (the global CDF while the tool has fewer than
``min_observations`` returns); queue_delay the mean admission delay of evicted requests; eta the
negative correlation of turn index and turns remaining over finished programs; reload_cost the
fitted prefill time of the context, or bytes / bandwidth when the host tier can hold it
(``reload="auto"``). Cold start (fewer than ``min_observations`` returns in total): exponential
durations with mean ``cold_mean_s`` and eta = 1, where the best tau is ``m * ln(V / m)`` for
``V > m`` (else 0). tau > 0 pins with TTL tau; at expiry the program is unpinned (KEEP). Under
pressure, programs are unpinned and evicted latest-arriving first: score = -arrival.

``variant="released"`` is the released code's rule: a fixed ``released_ttl_s`` (2 s) pin for
tools whose mean observed duration is under it (``cold_mean_s`` when unobserved), else no pin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from search_spaces.params import check_choice, check_range
from search_spaces.survival.api import SessionView, SurvivalView
from search_spaces.survival.common import SurvivalFamily

NAME = "ttl"


@dataclass(frozen=True)
class ContinuumParams:
    variant: str = "paper"
    min_observations: int = 100
    cold_mean_s: float = 1.0
    reload: str = "auto"
    released_ttl_s: float = 2.0

    def __post_init__(self) -> None:
        check_choice(NAME, "variant", self.variant, ("paper", "released"))
        check_range(NAME, "min_observations", self.min_observations, 1, 1_000_000)
        check_range(NAME, "cold_mean_s", self.cold_mean_s, 1e-6, 1e6)
        check_choice(NAME, "reload", self.reload, ("auto", "prefill", "swap"))
        check_range(NAME, "released_ttl_s", self.released_ttl_s, 0.0, 1e6)


def reload_cost(view: SurvivalView, s: SessionView, how: str) -> float:
    """Seconds to bring ``s``'s KV back: from host when it fits there (``auto``), else recompute."""
    if how == "swap" or (how == "auto" and view.host_bytes > 0 and view.host_free() >= s.kv_bytes):
        return view.t_swap(s.kv_bytes)
    return view.t_fwd(s.context_tokens)


def choose_ttl(view: SurvivalView, s: SessionView, p: ContinuumParams) -> float:
    """Continuum's TTL for ``s`` (seconds; 0 = do not pin)."""
    cold = view.n_returns < p.min_observations
    eta = 1.0 if cold or view.eta is None else view.eta
    queue = view.queue_delay_s if view.queue_delay_s is not None else 0.0
    value = queue * eta + reload_cost(view, s, p.reload)
    if cold:
        m = p.cold_mean_s
        return m * math.log(value / m) if value > m else 0.0
    own = view.durations(s.tool)
    values = sorted(own if len(own) >= p.min_observations else view.all_durations)
    n = len(values)
    best_tau = 0.0
    best = sum(1 for v in values if v <= 0.0) / n * value
    for i, tau in enumerate(values):
        if i + 1 < n and values[i + 1] == tau:
            continue  # F(tau) counts every duration equal to tau: use the last of a run
        gain = (i + 1) / n * value - tau
        if gain > best:
            best, best_tau = gain, tau
    return best_tau


def decide(view: SurvivalView, p: ContinuumParams) -> dict[str, dict[str, Any]]:
    out = {}
    for s in view.sessions:
        score = -s.arrival_s
        if s.previous is not None:  # the pin expired: unpin (the program has nothing waiting)
            out[s.session] = view.decision("keep", None, score)
            continue
        if p.variant == "released":
            own = view.durations(s.tool)
            mean = sum(own) / len(own) if own else p.cold_mean_s
            pin = mean < p.released_ttl_s and p.released_ttl_s > 0
            out[s.session] = (view.decision("pin", p.released_ttl_s, score) if pin
                              else view.decision("keep", None, score))
            continue
        tau = choose_ttl(view, s, p)
        out[s.session] = view.decision("pin", tau, score) if tau > 0 else view.decision("keep", None, score)
    return out


def space(trial: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"variant": trial.suggest_categorical("variant", ["paper", "released"])}
    if params["variant"] == "paper":
        params["min_observations"] = trial.suggest_int("min_observations", 5, 200, log=True)
        params["cold_mean_s"] = trial.suggest_float("cold_mean_s", 0.1, 30.0, log=True)
        params["reload"] = trial.suggest_categorical("reload", ["auto", "prefill", "swap"])
    else:
        params["released_ttl_s"] = trial.suggest_float("released_ttl_s", 0.1, 30.0, log=True)
    return params


FAMILY = SurvivalFamily(NAME, "Continuum (TTL pinning of tool-calling programs)", ContinuumParams,
                        decide, space, "pin for a TTL chosen from the tool's duration CDF and the reload cost")
