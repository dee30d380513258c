"""Seed survival program ``program_priority`` (Autellix PLAS / ATLAS): queue = how many doubling
quanta of service the program attained (promoted to 0 when wait / service >= beta); score =
-queue, so the most served programs lose their KV first. Same decisions as
``search_spaces.survival.autellix``."""

DEFAULTS = {
    "mode": "plas",
    "levels": 4,
    "quantum_s": 1.0,
    "beta": 2.0,
    "swap_level": 4,
    "discard_level": 4,
}


def queue_of(service, params):
    level = 0
    for i in range(1, params["levels"]):
        if service >= params["quantum_s"] * (2 ** i - 1):
            level = i
    return level


def decide(request, params):
    out = {}
    host = request.host_free()
    for s in request.sessions:
        service = s.program_service_s if params["mode"] == "plas" else s.critical_s
        level = queue_of(service, params)
        if params["beta"] > 0 and s.queue_wait_s / max(service, 1e-9) >= params["beta"]:
            level = 0
        score = float(-level)
        size = s.resident_tokens * request.bytes_per_token
        if level >= params["discard_level"]:
            out[s.session] = request.decision("discard", None, score)
        elif level >= params["swap_level"] and 0 < size <= host:
            out[s.session] = request.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = request.decision("keep", None, score)
    return out


def space(trial):
    levels = trial.suggest_int("levels", 2, 8)
    return {
        "mode": trial.suggest_categorical("mode", ["plas", "atlas"]),
        "levels": levels,
        "quantum_s": trial.suggest_float("quantum_s", 0.05, 30.0, log=True),
        "beta": trial.suggest_float("beta", 0.0, 10.0),
        "swap_level": trial.suggest_int("swap_level", 1, 8),
        "discard_level": trial.suggest_int("discard_level", 1, 8),
    }
