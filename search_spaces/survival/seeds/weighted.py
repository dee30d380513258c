"""Seed survival program ``weighted``: score = W_cost*cost - W_gap*gap - W_ref*ref + W_intent*intent
(each axis in [0, 1]) with W_k = w_k + m_k_pressure*pressure + m_k_slow*slow; pin / swap / discard
by thresholds, otherwise keep. Same decisions as ``search_spaces.survival.weighted``."""

import math

AXES = ["cost", "gap", "ref", "intent"]
FEATURES = ["pressure", "slow"]

DEFAULTS = {
    "w_cost": 1.0,
    "w_gap": 1.0,
    "w_ref": 1.0,
    "w_intent": 0.5,
    "m_cost_pressure": 0.0,
    "m_cost_slow": 0.0,
    "m_gap_pressure": 0.0,
    "m_gap_slow": 0.0,
    "m_ref_pressure": 0.0,
    "m_ref_slow": 0.0,
    "m_intent_pressure": 0.0,
    "m_intent_slow": 0.0,
    "ref_cost_s": 1.0,
    "ref_gap_s": 5.0,
    "horizon_s": 5.0,
    "min_observations": 20,
    "cold_mean_s": 1.0,
    "neutral_intent": 0.5,
    "pin_above": 100.0,
    "swap_below": -100.0,
    "discard_below": -100.0,
    "rescore_s": 0.0,
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


def expected_remaining(request, s, min_observations, cold_mean):
    if s.expected_gap_s is not None:
        return max(0.0, s.expected_gap_s - s.waited_s)
    values = gap_values(request, s, min_observations)
    if values is None:
        return cold_mean
    rest = [v - s.waited_s for v in values if v > s.waited_s]
    return sum(rest) / len(rest) if rest else 0.0


def weights(request, params):
    pressure = min(1.0, max(0.0, request.pressure()))
    durations = request.all_durations
    slow = sum(1 for d in durations if d > 1.0) / len(durations) if durations else 0.0
    return {a: params["w_" + a] + params["m_" + a + "_pressure"] * pressure + params["m_" + a + "_slow"] * slow
            for a in AXES}


def decide(request, params):
    w = weights(request, params)
    out = {}
    host = request.host_free()
    ttl = params["rescore_s"] if params["rescore_s"] > 0 else None
    for s in request.sessions:
        t_fwd = request.t_fwd(s.context_tokens)
        rest = expected_remaining(request, s, params["min_observations"], params["cold_mean_s"])
        cost = t_fwd / (t_fwd + params["ref_cost_s"])
        gap = rest / (rest + params["ref_gap_s"])
        ref = 1.0 - reuse_probability(request, s, params["horizon_s"], params["min_observations"],
                                      params["cold_mean_s"])
        intent = s.relevance if s.relevance is not None else params["neutral_intent"]
        score = w["cost"] * cost - w["gap"] * gap - w["ref"] * ref + w["intent"] * intent
        size = s.resident_tokens * request.bytes_per_token
        if score >= params["pin_above"]:
            out[s.session] = request.decision("pin", rest if rest > 0 else ttl, score)
        elif score < params["discard_below"]:
            out[s.session] = request.decision("discard", None, score)
        elif score < params["swap_below"] and 0 < size <= host:
            out[s.session] = request.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = request.decision("keep", ttl, score)
    return out


def space(trial):
    params = {}
    for a in AXES:
        params["w_" + a] = trial.suggest_float("w_" + a, -2.0, 2.0)
    if trial.suggest_categorical("adaptive", [False, True]):
        for a in AXES:
            for f in FEATURES:
                params["m_" + a + "_" + f] = trial.suggest_float("m_" + a + "_" + f, -2.0, 2.0)
    params["ref_cost_s"] = trial.suggest_float("ref_cost_s", 0.01, 30.0, log=True)
    params["ref_gap_s"] = trial.suggest_float("ref_gap_s", 0.1, 300.0, log=True)
    params["horizon_s"] = trial.suggest_float("horizon_s", 0.1, 120.0, log=True)
    if trial.suggest_categorical("thresholds", [False, True]):
        params["pin_above"] = trial.suggest_float("pin_above", -2.0, 4.0)
        params["swap_below"] = trial.suggest_float("swap_below", -4.0, 2.0)
        params["discard_below"] = trial.suggest_float("discard_below", -4.0, params["swap_below"])
    return params
