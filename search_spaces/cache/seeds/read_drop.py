"""Seed program ``read_drop``: drop a tool response once the agent has read it (``read_after``
assistant turns came after it) when it has at least ``min_tokens`` tokens, and, with ``supersede``,
once a later tool response answers the same call. Same decisions as the built-in family
``search_spaces.families.read_drop``."""

DEFAULTS = {"read_after": 1, "min_tokens": 256, "supersede": True}


def decide(request, params):
    plan = request.plan()
    attended = []
    for m in request.messages:
        t = m.index
        if m.is_tool:
            attended.append(t)
        turns = request.calls_before(t + 1)
        gone = []
        for i in attended:
            long_read = turns - request.calls_before(i + 1) >= params["read_after"]
            read = long_read and request.tokens[i] >= params["min_tokens"]
            stale = params["supersede"] and 0 <= request.superseded_by(i) <= t
            if read or stale:
                gone.append(i)
        plan.drop(t, gone)
        attended = [i for i in attended if i not in gone]
    return plan


def space(trial):
    return {"read_after": trial.suggest_int("read_after", 0, 8),
            "min_tokens": trial.suggest_int("min_tokens", 8, 4096, log=True),
            "supersede": trial.suggest_categorical("supersede", [True, False])}
