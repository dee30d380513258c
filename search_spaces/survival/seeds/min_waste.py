"""Seed survival program ``min_waste`` (InferCept): per paused request W_preserve = T_gap*C*M,
W_discard = T_fwd(C)*C*M*(1/2 if chunked) + T_fwd(C)*C_other*M, W_swap = 2*T_swap*C_other*M; sort by
min(preserve, discard), swap the largest while the per-step budget lasts, else the lesser waste.
Same decisions as ``search_spaces.survival.infercept``."""

DEFAULTS = {
    "gap_estimate": "waited",
    "recheck_s": 0.5,
    "chunked": False,
    "swap_budget_steps": 1.0,
    "preserve_below_s": 4.0,
    "swap_below_s": 7.0,
}


def wastes(request, s, params):
    m = request.bytes_per_token
    c = s.context_tokens
    if params["gap_estimate"] == "expected" and s.expected_gap_s is not None:
        gap = s.expected_gap_s
    else:
        gap = s.waited_s
    t_fwd = request.t_fwd(c)
    preserve = gap * c * m
    discard = t_fwd * c * m * (0.5 if params["chunked"] else 1.0) + t_fwd * request.running_tokens * m
    swap = 2 * request.t_swap(s.resident_tokens * m) * request.running_tokens * m
    return preserve, discard, swap


def thresholds(request, s, params):
    score = request.t_fwd(s.context_tokens)
    if s.expected_gap_s is not None:
        d = s.expected_gap_s
        if d < params["preserve_below_s"]:
            return request.decision("pin", None, score)
        if d < params["swap_below_s"]:
            return request.decision("swap", None, None)
        return request.decision("discard", None, None)
    w = s.waited_s
    if w < params["preserve_below_s"]:
        return request.decision("pin", params["preserve_below_s"] - w, score)
    if w < params["swap_below_s"]:
        return request.decision("swap", params["swap_below_s"] - w, None)
    return request.decision("discard", None, None)


def decide(request, params):
    if params["gap_estimate"] == "thresholds":
        return {s.session: thresholds(request, s, params) for s in request.sessions}
    rows = []
    for s in request.sessions:
        preserve, discard, swap = wastes(request, s, params)
        rows.append((-min(preserve, discard), s.session, preserve, discard, swap, s))
    rows.sort(key=lambda r: (r[0], r[1]))
    per_byte = request.t_swap(1.0)
    if per_byte > 0:
        budget = params["swap_budget_steps"] * request.t_decode(max(1, request.running)) / per_byte
    else:
        budget = 0.0
    host = request.host_free()
    out = {}
    for row in rows:
        preserve, discard, swap, s = row[2], row[3], row[4], row[5]
        least = min(preserve, discard)
        size = s.resident_tokens * request.bytes_per_token
        if 0 < size <= budget and size <= host and swap < least:
            out[s.session] = request.decision("swap", None, None)
            budget -= size
            host -= size
        elif preserve <= discard:
            out[s.session] = request.decision("pin", params["recheck_s"], request.t_fwd(s.context_tokens))
        else:
            out[s.session] = request.decision("discard", None, None)
    return out


def space(trial):
    params = {"gap_estimate": trial.suggest_categorical("gap_estimate", ["waited", "expected", "thresholds"])}
    if params["gap_estimate"] == "thresholds":
        params["preserve_below_s"] = trial.suggest_float("preserve_below_s", 0.1, 30.0, log=True)
        params["swap_below_s"] = params["preserve_below_s"] + trial.suggest_float("swap_after_s", 0.0, 30.0)
    else:
        params["recheck_s"] = trial.suggest_float("recheck_s", 0.05, 10.0, log=True)
        params["chunked"] = trial.suggest_categorical("chunked", [False, True])
        params["swap_budget_steps"] = trial.suggest_float("swap_budget_steps", 0.0, 16.0)
    return params
