"""Seed survival program ``lru``: keep every paused session's KV as ordinary cache (least recently
used first under pressure). Same decisions as ``search_spaces.survival.lru``."""

DEFAULTS: dict = {}


def decide(request, params):
    return {s.session: request.decision("keep", None, None) for s in request.sessions}


def space(trial):
    return {}
