"""Seed survival program ``intent`` (IntentKV stand-in): score = relevance of the session's context
to its task (bag-of-words similarity computed by the harness) - w_size * size; evict the lowest.
Same decisions as ``search_spaces.survival.intent``."""

DEFAULTS = {
    "neutral": 0.5,
    "w_size": 0.0,
    "size_max_tokens": 32768,
    "swap_below": 0.0,
    "discard_below": 0.0,
}


def decide(request, params):
    out = {}
    host = request.host_free()
    for s in request.sessions:
        relevance = s.relevance if s.relevance is not None else params["neutral"]
        score = relevance - params["w_size"] * min(1.0, s.context_tokens / params["size_max_tokens"])
        size = s.resident_tokens * request.bytes_per_token
        if relevance < params["discard_below"]:
            out[s.session] = request.decision("discard", None, score)
        elif relevance < params["swap_below"] and 0 < size <= host:
            out[s.session] = request.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = request.decision("keep", None, score)
    return out


def space(trial):
    return {
        "neutral": trial.suggest_float("neutral", 0.0, 1.0),
        "w_size": trial.suggest_float("w_size", -1.0, 1.0),
        "swap_below": trial.suggest_float("swap_below", 0.0, 1.0),
        "discard_below": trial.suggest_float("discard_below", 0.0, 0.5),
    }
