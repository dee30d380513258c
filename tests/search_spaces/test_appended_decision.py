"""The incremental decision check against the full one.

``appended_decision`` validates a decision in time proportional to what it adds to the previous
one; whenever it answers, the full check (``cache_decision``: parse, then nothing rewritten
below the previous request) must accept the same decision and parse it to the same schedule.
Hostile variants (changed or removed entries, additions below the horizon, ``True`` for 1, text
drops, double drops, bad repositions, other layouts) must be left to the full check.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_spaces.cache.decision import appended_decision, cache_decision
from search_spaces.cache.request import Episode
from search_spaces.errors import DecisionError

N = 14  # messages in the trajectory
MESSAGES = [{"role": "user" if i == 0 else ("assistant" if i % 2 else "tool"), "content": f"m{i}"} for i in range(N)]
EPISODE = Episode.of(MESSAGES, [3] * N)


def _wire(tables: dict[str, dict[str, list[Any]]], repositions: list[Any], layout: str) -> dict[str, Any]:
    """The wire form of per-kind tables: ``drop_message`` when only message drops and ``layout`` is
    ``message``, else a ``drop_rule`` (one rule, or a list)."""
    kinds = {k: t for k, t in tables.items() if t}
    if layout == "message" and set(kinds) <= {"message"}:
        return {"drop_message": kinds.get("message", {}), "reposition": repositions}
    rules = [{"type": f"{k}_drop", "drop_messages": t} for k, t in kinds.items()]
    return {"drop_rule": rules[0] if len(rules) == 1 else rules, "reposition": repositions}


@st.composite
def pairs(draw):
    """(previous wire, its request size, new wire, new request size, what was done to it)."""
    horizon = draw(st.integers(1, N - 2))
    n = draw(st.integers(horizon + 1, N))
    free = {"message": set(range(N)), "thinking": set(range(N))}
    old: dict[str, dict[str, list[Any]]] = {"message": {}, "thinking": {}}
    for trigger in range(horizon):
        for kind in old:
            ids = sorted(i for i in free[kind] if i <= trigger and draw(st.integers(0, 5)) == 0)
            if ids:
                old[kind][str(trigger)] = ids
                free[kind] -= set(ids)
    old_repos = sorted(draw(st.sets(st.integers(0, horizon - 1), max_size=2)))
    layout = draw(st.sampled_from(["message", "rule"]))
    previous = _wire(old, old_repos, layout)
    new = copy.deepcopy(old)
    for trigger in range(horizon, n):
        for kind in new:
            ids = sorted(i for i in free[kind] if i <= trigger and draw(st.integers(0, 3)) == 0)
            if ids:
                new[kind][str(trigger)] = ids
                free[kind] -= set(ids)
    repos = old_repos + sorted(draw(st.sets(st.integers(horizon, n - 1), max_size=2)))
    mutation = draw(st.sampled_from([
        "none", "none", "none", "change-old", "remove-old", "add-below-horizon", "bool-id", "float-id",
        "double-drop", "id-after-trigger", "id-out-of-range", "repos-rewritten", "repos-below-horizon",
        "repos-unsorted", "text-drop", "cache-alias", "int-key", "padded-key", "relayout"]))
    wire_layout = layout
    old_keys = [(k, t) for k, table in new.items() for t in table if int(t) < horizon]
    if mutation == "change-old" and old_keys:
        kind, t = draw(st.sampled_from(old_keys))
        new[kind][t] = new[kind][t] + [int(t)] if int(t) not in new[kind][t] else new[kind][t][:-1]
    elif mutation == "remove-old" and old_keys:
        kind, t = draw(st.sampled_from(old_keys))
        del new[kind][t]
    elif mutation == "add-below-horizon":
        t = draw(st.integers(0, horizon - 1))
        if str(t) not in new["message"]:
            new["message"][str(t)] = [t]
    elif mutation in ("bool-id", "float-id") and old_keys:
        kind, t = draw(st.sampled_from(old_keys))
        ids = list(new[kind][t])
        ids[0] = (ids[0] == 1) if mutation == "bool-id" and ids[0] in (0, 1) else float(ids[0])
        new[kind][t] = ids
    elif mutation == "double-drop" and old_keys:
        kind, t = draw(st.sampled_from(old_keys))
        new[kind][str(n - 1)] = sorted(set(new[kind].get(str(n - 1), [])) | {new[kind][t][0]})
    elif mutation == "id-after-trigger":
        new["message"][str(horizon)] = [horizon + 1]
    elif mutation == "id-out-of-range":
        new["message"][str(n - 1)] = [n + 3]
    elif mutation == "repos-rewritten" and old_repos:
        repos = [r for r in repos if r != old_repos[0]]
    elif mutation == "repos-below-horizon":
        repos = sorted(set(repos) | {horizon - 1})
    elif mutation == "repos-unsorted" and len(repos) > 1:
        repos = list(reversed(repos))
    elif mutation == "relayout":
        wire_layout = "rule" if layout == "message" else "message"
    wire = _wire(new, repos, wire_layout)
    if mutation == "text-drop":
        wire = {"drop_rule": [{"type": "text_drop", "drop_messages": {str(n - 1): [
            {"message": 0, "start": 0, "end": 1}]}}], "reposition": repos}
    elif mutation == "cache-alias":
        wire = {"cache": wire}
    elif mutation in ("int-key", "padded-key") and "drop_message" in wire and wire["drop_message"]:
        key = max(wire["drop_message"], key=int)
        moved = int(key) if mutation == "int-key" else f" {key}"
        wire["drop_message"] = {**{k: v for k, v in wire["drop_message"].items() if k != key},
                                moved: wire["drop_message"][key]}
    return previous, horizon, wire, n, mutation


def _full(previous: dict[str, Any], horizon: int, wire: dict[str, Any], n: int):
    parsed_previous = cache_decision(previous, EPISODE.request(horizon, None, 0))
    try:
        return parsed_previous, cache_decision(wire, EPISODE.request(n, previous, horizon), parsed_previous.schedule)
    except DecisionError:
        return parsed_previous, None


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs())
def test_an_appended_decision_is_what_the_full_check_accepts(drawn):
    previous, horizon, wire, n, mutation = drawn
    parsed_previous, full = _full(previous, horizon, wire, n)
    fast = appended_decision(copy.deepcopy(wire), n, previous, parsed_previous)
    if fast is not None:
        assert full is not None, mutation
        assert fast.schedule == full.schedule and fast.n_messages == full.n_messages == n
    if mutation == "none":  # a plain extension is taken by the fast path (else it would never run)
        assert fast is not None


def test_the_fast_path_leaves_every_hostile_addition_to_the_full_check():
    previous = {"drop_message": {"2": [1]}, "reposition": [2]}
    parsed = cache_decision(previous, EPISODE.request(4, None, 0))
    for wire in (
        {"drop_message": {"2": [True]}, "reposition": [2]},  # True == 1, but not an id
        {"drop_message": {"2": [1], "3": [1]}, "reposition": [2]},  # 1 dropped twice
        {"drop_message": {"2": [1], "3": [3]}, "reposition": [2]},  # added below the horizon (4)
        {"drop_message": {"2": [1], "5": [9]}, "reposition": [2]},  # an id after its trigger
        {"drop_message": {"2": [1], "05": [0]}, "reposition": [2]},  # not a canonical id
        {"drop_message": {"2": [1]}, "reposition": [2, 3]},  # a reposition below the horizon
        {"drop_message": {}, "reposition": [2]},  # a drop removed
    ):
        assert appended_decision(wire, 6, previous, parsed) is None, wire
