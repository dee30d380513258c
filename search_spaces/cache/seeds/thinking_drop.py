"""Seed program ``thinking_drop``: drop the reasoning of assistant turns older than the newest
``keep_turns``, in groups of ``drop_batch``, triggered by the arriving assistant turn. Same
decisions as the built-in family ``search_spaces.families.thinking``."""

DEFAULTS = {"keep_turns": 1, "drop_batch": 1}


def decide(request, params):
    plan = request.plan()
    turns = []
    pending = []
    for m in request.messages:
        if not m.is_assistant:
            continue
        turns.append(m.index)
        if len(turns) > params["keep_turns"]:
            old = turns[len(turns) - params["keep_turns"] - 1]
            if request.messages[old].has_reasoning:
                pending.append(old)
        if len(pending) >= params["drop_batch"]:
            plan.drop_reasoning(m.index, pending)
            pending = []
    return plan


def space(trial):
    return {"keep_turns": trial.suggest_int("keep_turns", 0, 8), "drop_batch": trial.suggest_int("drop_batch", 1, 4)}
