"""Seed survival program ``ttl`` (Continuum): pin for the TTL tau in {0} + observed durations that
maximises F(tau) * (queue_delay * eta + reload_cost) - tau; unpin at expiry; under pressure the
latest-arriving program goes first. Same decisions as ``search_spaces.survival.continuum``."""

import math

DEFAULTS = {
    "variant": "paper",
    "min_observations": 100,
    "cold_mean_s": 1.0,
    "reload": "auto",
    "released_ttl_s": 2.0,
}


def reload_cost(request, s, how):
    if how == "swap" or (how == "auto" and request.host_bytes > 0 and request.host_free() >= s.kv_bytes):
        return request.t_swap(s.kv_bytes)
    return request.t_fwd(s.context_tokens)


def choose_ttl(request, s, params):
    cold = request.n_returns < params["min_observations"]
    eta = 1.0 if cold or request.eta is None else request.eta
    queue = request.queue_delay_s if request.queue_delay_s is not None else 0.0
    value = queue * eta + reload_cost(request, s, params["reload"])
    if cold:
        m = params["cold_mean_s"]
        return m * math.log(value / m) if value > m else 0.0
    own = request.durations(s.tool)
    values = sorted(own if len(own) >= params["min_observations"] else request.all_durations)
    n = len(values)
    best_tau = 0.0
    best = sum(1 for v in values if v <= 0.0) / n * value
    for i, tau in enumerate(values):
        if i + 1 < n and values[i + 1] == tau:
            continue
        gain = (i + 1) / n * value - tau
        if gain > best:
            best, best_tau = gain, tau
    return best_tau


def decide(request, params):
    out = {}
    for s in request.sessions:
        score = -s.arrival_s
        if s.previous is not None:
            out[s.session] = request.decision("keep", None, score)
            continue
        if params["variant"] == "released":
            own = request.durations(s.tool)
            mean = sum(own) / len(own) if own else params["cold_mean_s"]
            ttl = params["released_ttl_s"]
            if mean < ttl and ttl > 0:
                out[s.session] = request.decision("pin", ttl, score)
            else:
                out[s.session] = request.decision("keep", None, score)
            continue
        tau = choose_ttl(request, s, params)
        if tau > 0:
            out[s.session] = request.decision("pin", tau, score)
        else:
            out[s.session] = request.decision("keep", None, score)
    return out


def space(trial):
    params = {"variant": trial.suggest_categorical("variant", ["paper", "released"])}
    if params["variant"] == "paper":
        params["min_observations"] = trial.suggest_int("min_observations", 5, 200, log=True)
        params["cold_mean_s"] = trial.suggest_float("cold_mean_s", 0.1, 30.0, log=True)
        params["reload"] = trial.suggest_categorical("reload", ["auto", "prefill", "swap"])
    else:
        params["released_ttl_s"] = trial.suggest_float("released_ttl_s", 0.1, 30.0, log=True)
    return params
