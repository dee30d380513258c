"""Seed program ``full``: no cache operations (the reference point)."""

DEFAULTS: dict[str, int] = {}


def decide(request, params):
    return request.plan()


def space(trial):
    return {}
