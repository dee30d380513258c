"""Seed survival program ``next_ref`` (UNISON-style): p_evict = a*min(1, idle/tau_max)
+ b*(1 - P_reuse) + c*min(1, tokens/size_max), P_reuse from the shared log's pause durations;
evict the largest. Same decisions as ``search_spaces.survival.unison``."""

import math

DEFAULTS = {
    "a": 0.4,
    "b": 0.4,
    "c": 0.2,
    "tau_max_s": 30.0,
    "horizon_s": 5.0,
    "size_max_tokens": 32768,
    "min_observations": 20,
    "cold_mean_s": 1.0,
    "rescore_s": 0.0,
    "swap_above": 100.0,
    "discard_above": 100.0,
}


def gap_values(request, s, min_observations):
    own = request.durations(s.tool)
    if len(own) >= min_observations:
        return own
    if len(request.all_durations) >= min_observations:
        return request.all_durations
    return None


def reuse_probability(request, s, horizon, min_observations, cold_mean):
    if s.expected_gap_s is not None:
        rest = max(0.0, s.expected_gap_s - s.waited_s)
        return 1.0 if rest <= 0 else 1.0 - math.exp(-horizon / rest)
    values = gap_values(request, s, min_observations)
    if values is None:
        return 1.0 - math.exp(-horizon / cold_mean)
    now = request.ecdf(values, s.waited_s)
    tail = 1.0 - now
    if tail <= 0:
        return 1.0
    return (request.ecdf(values, s.waited_s + horizon) - now) / tail


def decide(request, params):
    out = {}
    host = request.host_free()
    ttl = params["rescore_s"] if params["rescore_s"] > 0 else None
    for s in request.sessions:
        reuse = reuse_probability(request, s, params["horizon_s"], params["min_observations"], params["cold_mean_s"])
        pe = (params["a"] * min(1.0, s.waited_s / params["tau_max_s"]) + params["b"] * (1.0 - reuse)
              + params["c"] * min(1.0, s.context_tokens / params["size_max_tokens"]))
        size = s.resident_tokens * request.bytes_per_token
        if pe >= params["discard_above"]:
            out[s.session] = request.decision("discard", None, -pe)
        elif pe >= params["swap_above"] and 0 < size <= host:
            out[s.session] = request.decision("swap", None, -pe)
            host -= size
        else:
            out[s.session] = request.decision("keep", ttl, -pe)
    return out


def space(trial):
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
