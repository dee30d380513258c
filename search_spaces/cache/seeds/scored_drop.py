"""Seed program ``scored_drop``: over a KV budget, drop the lowest-scoring messages, scored by
recency, recompute cost, estimated reference distance (entity overlap with later messages) and
intent relevance, with weights that may follow the workload. Same decisions as the built-in
family ``search_spaces.families.scored``; see its docstring for the formulas."""

import math

WEIGHTS = ["recency", "cost", "reference", "intent"]
FEATURES = ["tool_rate", "session", "pressure"]
ROLES = {"tool": ["tool"], "tool_assistant": ["tool", "assistant"], "any": ["tool", "assistant", "user"]}

DEFAULTS = {
    "budget_tokens": 2048,
    "target_ratio": 0.75,
    "protect_last": 4,
    "targets": "tool",
    "w_recency": 1.0,
    "w_cost": -0.25,
    "w_reference": 1.0,
    "w_intent": 0.0,
    "m_recency_tool_rate": 0.0,
    "m_recency_session": 0.0,
    "m_recency_pressure": 0.0,
    "m_cost_tool_rate": 0.0,
    "m_cost_session": 0.0,
    "m_cost_pressure": 0.0,
    "m_reference_tool_rate": 0.0,
    "m_reference_session": 0.0,
    "m_reference_pressure": 0.0,
    "m_intent_tool_rate": 0.0,
    "m_intent_session": 0.0,
    "m_intent_pressure": 0.0,
    "reposition_tokens": 0,
}

NEEDS = {"relevance": ["w_intent", "m_intent_tool_rate", "m_intent_session", "m_intent_pressure"]}


def weights(params, tool_rate, session, pressure):
    return [params["w_" + w] + params["m_" + w + "_tool_rate"] * tool_rate + params["m_" + w + "_session"] * session
            + params["m_" + w + "_pressure"] * pressure for w in WEIGHTS]


def decide(request, params):
    plan = request.plan()
    roles = ROLES[params["targets"]]
    users = request.user_messages()
    first_user = users[0] if users else -1
    budget = params["budget_tokens"]
    target_live = int(budget * params["target_ratio"])
    holders: dict[str, list[int]] = {}
    last_ref = {}
    overlap = {}
    dropped = set()
    live = 0
    pos = 0
    max_tok = 0
    n_tool = 0
    n_asst = 0
    gap = False
    for m in request.messages:
        t = m.index
        live += m.tokens
        pos += m.tokens
        max_tok = max(max_tok, m.tokens)
        n_tool += 1 if m.is_tool else 0
        n_asst += 1 if m.is_assistant else 0
        common: dict[int, int] = {}
        for e in request.entities(t):
            for i in holders.get(e, []):
                common[i] = common.get(i, 0) + 1
            holders.setdefault(e, []).append(t)
        for i, c in common.items():
            last_ref[i] = t
            overlap[i] = c / len(request.entities(i))
        if live > budget:
            wr, wc, wf, wi = weights(params, n_tool / (t + 1), n_asst / (n_asst + 10), live / budget)
            scored = []
            for i in range(t - params["protect_last"] + 1):
                c_m = request.messages[i]
                if i in dropped or i == first_user or c_m.is_system or c_m.role not in roles:
                    continue
                recency = (i + 1) / (t + 1)
                cost = math.log1p(request.tokens[i]) / math.log1p(max_tok) if max_tok > 0 else 0.0
                reference = overlap[i] / (1 + t - last_ref[i]) if i in last_ref else 0.0
                intent = request.relevance[i] if request.relevance is not None else 0.0
                scored.append((wr * recency + wc * cost + wf * reference + wi * intent, i))
            victims = []
            for pair in sorted(scored):
                if live <= target_live:
                    break
                victims.append(pair[1])
                dropped.add(pair[1])
                live -= request.tokens[pair[1]]
            if victims:
                plan.drop(t, victims)
                gap = True
        if params["reposition_tokens"] > 0 and gap and pos > params["reposition_tokens"]:
            plan.reposition(t)
            pos = live
            gap = False
    return plan


def space(trial):
    params = {
        "budget_tokens": trial.suggest_int("budget_tokens", 512, 8192, log=True),
        "target_ratio": trial.suggest_float("target_ratio", 0.3, 0.95),
        "protect_last": trial.suggest_int("protect_last", 0, 12),
        "targets": trial.suggest_categorical("targets", ["tool", "tool_assistant", "any"]),
        "w_recency": trial.suggest_float("w_recency", -2.0, 2.0),
        "w_cost": trial.suggest_float("w_cost", -2.0, 2.0),
        "w_reference": trial.suggest_float("w_reference", -2.0, 2.0),
    }
    use_intent = trial.suggest_categorical("use_intent", [False, True])
    if use_intent:
        params["w_intent"] = trial.suggest_float("w_intent", 0.0, 2.0)
    if trial.suggest_categorical("use_modifiers", [False, True]):
        for w in WEIGHTS if use_intent else WEIGHTS[:3]:
            for f in FEATURES:
                params["m_" + w + "_" + f] = trial.suggest_float("m_" + w + "_" + f, -1.0, 1.0)
    if trial.suggest_categorical("reposition", [False, True]):
        params["reposition_tokens"] = trial.suggest_int("reposition_tokens", 512, 8192, log=True)
    return params
