"""Seed program ``rolling_drop``: keep the newest K target messages' KV (the expert policy at the
defaults: K = 12 tool responses; the (K+1)-th newer one drops the oldest). Same decisions as the
built-in family ``search_spaces.families.rolling``; see its docstring for every parameter."""

DEFAULTS = {
    "keep_tool_responses": 12,
    "target": "tool",
    "trigger": "responses",
    "drop_batch": 1,
    "every_calls": 4,
    "trigger_tokens": 3072,
    "target_tokens": 2048,
    "reposition": "never",
    "reposition_start": 0,
    "reposition_every": 1,
    "reposition_tokens": 3072,
}

KINDS = {"tool": ["tool"], "assistant": ["assistant"], "both": ["tool", "assistant"]}


def reposition_due(request, params, t, pos):
    if params["reposition"] == "calls":
        c = request.calls_before(t)
        start = params["reposition_start"]
        return request.is_call_start(t) and c >= start and (c - start) % params["reposition_every"] == 0
    if params["reposition"] == "tokens":
        return pos > params["reposition_tokens"]
    return False


def decide(request, params):
    plan = request.plan()
    kinds = KINDS[params["target"]]
    k = params["keep_tool_responses"]
    queues: dict[str, list[int]] = {kind: [] for kind in kinds}
    live = 0
    pos = 0
    gap = False
    for m in request.messages:
        t = m.index
        live += m.tokens
        pos += m.tokens
        kind = m.role if m.role in kinds else ""
        if kind:
            queues[kind].append(t)
        victims = []
        if params["trigger"] == "responses":
            if kind and len(queues[kind]) >= k + params["drop_batch"]:
                q = queues[kind]
                victims = q[: len(q) - k]
                queues[kind] = q[len(q) - k:]
        elif params["trigger"] == "calls":
            if request.is_call_start(t) and request.calls_before(t) % params["every_calls"] == 0:
                for name in kinds:
                    q = queues[name]
                    cut = max(0, len(q) - k)
                    victims += q[:cut]
                    queues[name] = q[cut:]
        elif live > params["trigger_tokens"]:
            eligible = sorted(i for name in kinds for i in queues[name][: max(0, len(queues[name]) - k)])
            remaining = live
            for i in eligible:
                if remaining <= params["target_tokens"]:
                    break
                victims.append(i)
                remaining -= request.tokens[i]
            for name in kinds:
                queues[name] = [i for i in queues[name] if i not in victims]
        if victims:
            plan.drop(t, victims)
            live -= sum(request.tokens[i] for i in victims)
            gap = True
        if gap and reposition_due(request, params, t, pos):
            plan.reposition(t)
            pos = live
            gap = False
    return plan


def space(trial):
    params = {
        "keep_tool_responses": trial.suggest_int("keep_tool_responses", 1, 32),
        "target": trial.suggest_categorical("target", ["tool", "assistant", "both"]),
        "trigger": trial.suggest_categorical("trigger", ["responses", "calls", "tokens"]),
        "reposition": trial.suggest_categorical("reposition", ["never", "calls", "tokens"]),
    }
    if params["trigger"] == "responses":
        params["drop_batch"] = trial.suggest_int("drop_batch", 1, 8)
    elif params["trigger"] == "calls":
        params["every_calls"] = trial.suggest_int("every_calls", 1, 16)
    else:
        params["trigger_tokens"] = trial.suggest_int("trigger_tokens", 512, 8192, log=True)
        ratio = trial.suggest_float("target_ratio", 0.3, 0.95)
        params["target_tokens"] = int(params["trigger_tokens"] * ratio)
    if params["reposition"] == "calls":
        params["reposition_start"] = trial.suggest_int("reposition_start", 0, 16)
        params["reposition_every"] = trial.suggest_int("reposition_every", 1, 16)
    elif params["reposition"] == "tokens":
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
