"""Seed program ``rolling_drop``: keep the newest K tool responses' KV (the expert policy at the
defaults: K = 12; the (K+1)-th newer one drops the oldest). Same decisions as the built-in family
``search_spaces.families.rolling``; see its docstring for every parameter. A call end is the last
response of a complete tool batch (``request.call_ends()``)."""

DEFAULTS = {
    "keep_tool_responses": 12,
    "target": "tool",
    "trigger": "responses",
    "drop_batch": 1,
    "first_call": 0,
    "every_calls": 4,
    "trigger_tokens": 3072,
    "trigger_responses": 13,
    "target_tokens": 0,
    "reposition": "never",
    "reposition_start": 0,
    "reposition_every": 1,
    "reposition_tokens": 3072,
}

# target -> the roles that roll in a window of their own newest K
ROLLED = {"tool": ["tool"], "assistant": ["tool"], "both": ["tool"], "assistant_newest": ["assistant"],
          "both_newest": ["tool", "assistant"]}
BATCH_TARGETS = ["assistant", "both"]


def every(c, first, step):
    """Whether call number c is the first one or, with step > 0, a multiple of step calls after it."""
    return c == first or (step > 0 and c > first and (c - first) % step == 0)


def see(batches, m):
    """Group assistant turns with their tool batch (the targets assistant and both)."""
    if m.is_assistant:
        batches["pending"].append(m.index)
        batches["open"] = None
        if m.tool_calls:
            batches["open"] = {"group": batches["pending"], "need": len(m.tool_calls), "got": 0, "expired": 0}
            batches["pending"] = []
    elif m.is_tool and batches["open"] is not None and batches["open"]["got"] < batches["open"]["need"]:
        batches["open"]["got"] += 1
        batches["owner"][m.index] = batches["open"]
    elif not m.is_tool:
        batches["open"] = None


def expire(batches, ids):
    """The assistant turns whose whole batch has expired once ids expire."""
    out = []
    for i in ids:
        unit = batches["owner"].get(i)
        if unit is not None:
            unit["expired"] += 1
            if unit["expired"] == unit["need"]:
                out += unit["group"]
    return out


def fires(request, params, calls, visible, prompt):
    if params["trigger"] == "calls":
        return every(calls, params["first_call"] or params["every_calls"], params["every_calls"])
    if params["trigger"] == "tokens":
        return prompt > params["trigger_tokens"]
    return len(visible) >= params["trigger_responses"]


def decide(request, params):
    plan = request.plan()
    k = params["keep_tool_responses"]
    kept: dict[str, list[int]] = {role: [] for role in ROLLED[params["target"]]}
    batches = None
    if params["target"] in BATCH_TARGETS:
        batches = {"pending": [], "open": None, "owner": {}}
    ends = set()
    if params["trigger"] != "responses" or params["reposition"] != "never":
        ends = set(request.call_ends())
    calls = 0
    hidden = 0
    dropped = 0
    compacted = 0
    for m in request.messages:
        t = m.index
        if batches is not None:
            see(batches, m)
        if m.role in kept:
            kept[m.role].append(t)
        expired = []
        if t in ends:
            calls += 1
        if params["trigger"] == "responses":
            q = kept.get(m.role)
            if q is not None and len(q) >= k + params["drop_batch"]:
                expired = q[: len(q) - k]
        elif t in ends:
            if not m.is_tool:
                raise ValueError("call end " + str(t) + " is a " + m.role + " message: call-end triggers need "
                                 "tool batches (as in the AKV reference)")
            visible = sorted(i for q in kept.values() for i in q)
            prompt = request.tokens_between(0, t + 1) - hidden
            if fires(request, params, calls, visible, prompt):
                if params["target_tokens"]:
                    for i in visible:
                        if prompt <= params["target_tokens"]:
                            break
                        expired.append(i)
                        prompt -= request.tokens[i]
                else:
                    expired = sorted(i for q in kept.values() for i in q[: max(0, len(q) - k)])
        gone = set(expired)
        for role in kept:
            kept[role] = [i for i in kept[role] if i not in gone]
        hidden += sum(request.tokens[i] for i in expired)
        victims = [] if params["target"] == "assistant" else list(expired)
        if batches is not None:
            victims += expire(batches, expired)
        plan.drop(t, victims)
        dropped += sum(request.tokens[i] for i in victims)
        if t in ends and params["reposition"] == "calls":
            if every(calls, params["reposition_start"] or params["reposition_every"], params["reposition_every"]):
                plan.reposition(t)
        elif t in ends and params["reposition"] == "tokens":
            position = request.tokens_between(0, request.prompt_end(t) + 1) - compacted
            if position > params["reposition_tokens"] and dropped > compacted:
                plan.reposition(t)
                compacted = dropped
    return plan


def space(trial):
    params = {
        "keep_tool_responses": trial.suggest_int("keep_tool_responses", 1, 32),
        "target": trial.suggest_categorical("target", ["tool", "assistant", "both", "assistant_newest", "both_newest"]),
        "reposition": trial.suggest_categorical("reposition", ["never", "calls", "tokens"]),
    }
    if params["target"] not in BATCH_TARGETS:
        params["trigger"] = trial.suggest_categorical("trigger", ["responses", "calls", "tokens", "response_count"])
    trigger = params.get("trigger", "responses")
    if trigger == "responses":
        params["drop_batch"] = trial.suggest_int("drop_batch", 1, 8)
    elif trigger == "calls":
        params["first_call"] = trial.suggest_int("first_call", 1, 16)
        params["every_calls"] = trial.suggest_int("every_calls", 1, 16)
    elif trigger == "tokens":
        params["trigger_tokens"] = trial.suggest_int("trigger_tokens", 512, 8192, log=True)
        ratio = trial.suggest_float("target_ratio", 0.3, 0.95)
        params["target_tokens"] = int(params["trigger_tokens"] * ratio)
    else:
        k = params["keep_tool_responses"]
        params["trigger_responses"] = trial.suggest_int("trigger_responses", k + 1, k + 16)
    if params["reposition"] == "calls":
        params["reposition_start"] = trial.suggest_int("reposition_start", 1, 16)
        params["reposition_every"] = trial.suggest_int("reposition_every", 1, 16)
    elif params["reposition"] == "tokens":
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
