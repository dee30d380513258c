"""Rule programs (search_spaces.cache.rules): the rendered program decides as a slow interpreter of
the grammar does, request by request, on random structures and trajectories; hostile structures
and tool names are refused or quoted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search_spaces import Episode, check_program, estimate_tokens, get_policy, run_program
from search_spaces.cache import rules
from search_spaces.cache.program_api import RequestView
from search_spaces.cache.seeds import seed_source
from tests.search_spaces.trajectories import make_trajectory, trajectories

TOOLS = ("search", "read", 'we"ird\\tool')


def feature(view: RequestView, f: str, i: int, t: int) -> float:
    """The grammar's features of (i, t), written out from the API (the reference)."""
    msgs = view.messages
    if f == "age_tools":
        return sum(1 for m in msgs[i + 1:t + 1] if m.is_tool)
    if f == "age_calls":
        return sum(1 for m in msgs[i + 1:t + 1] if m.is_assistant)
    if f == "tokens":
        return view.tokens[i]
    if f in ("mentions", "mentions2"):
        least = 1 if f == "mentions" else 2
        return sum(1 for j in range(i + 1, t + 1) if (msgs[j].is_user or msgs[j].is_assistant)
                   and len(view.entities(i) & view.entities(j)) >= least)
    if f in ("batch_size", "batch_pos"):
        return view.batch_of(i)[1 if f == "batch_size" else 0]
    if f == "task_overlap":
        users = view.user_messages()
        return len(view.entities(i) & view.entities(users[0])) if users and users[0] != i else 0
    raise AssertionError(f)


def holds(c: dict, view: RequestView, i: int, t: int, params: dict) -> bool:
    if "all" in c:
        return all(holds(x, view, i, t, params) for x in c["all"])
    if "any" in c:
        return any(holds(x, view, i, t, params) for x in c["any"])
    if "not" in c:
        return not holds(c["not"], view, i, t, params)
    f = c["f"]
    m = view.messages[i]
    if f in rules.NUMERIC:
        v = feature(view, f, i, t)
        return v >= params[c["param"]] if c["op"] == ">=" else v < params[c["param"]]
    if f == "role":
        return m.role == c["is"]
    if f == "tool":
        name = m.name or (view.call_of(i) or ("", ""))[0] if m.is_tool else (m.tool_calls[0][0] if m.tool_calls else "")
        return name in c["in"]
    if f == "superseded":
        j = view.superseded_by(i)
        return 0 <= j <= t
    if f == "first_user":
        users = view.user_messages()
        return bool(users) and users[0] == i
    raise AssertionError(f)


def reference(structure: dict, view: RequestView, params: dict, base: dict | None = None) -> dict:
    """The schedule of ``structure`` for one request, every trigger decided from scratch; ``base``:
    the base seed's own schedule of the same request (a message no rule decides is dropped once the
    seed has dropped it; the seed's repositions are kept)."""
    table: dict[str, list[int]] = {}
    repos: list[int] = []
    dropped: set[int] = set()
    since = 0
    base_at: dict[int, int] = {}
    for key, ids in (base or {}).get("drop_message", {}).items():
        for i in ids:
            base_at[i] = min(base_at.get(i, int(key)), int(key))
    for t in range(view.n):
        victims = []
        for i in range(t + 1):
            if i in dropped:
                continue
            for rule in structure["rules"]:
                if holds(rule["when"], view, i, t, params):
                    if rule["action"] == "drop":
                        victims.append(i)
                    break
            else:
                if base_at.get(i, view.n) <= t:
                    victims.append(i)
        if victims:
            table[str(t)] = victims
            dropped |= set(victims)
            since += sum(view.tokens[i] for i in victims)
        rep = structure.get("reposition")
        seed_repositions = t in (base or {}).get("reposition", ())
        if seed_repositions or (rep and since > 0 and since >= params[rep["param"]]):
            repos.append(t)
            since = 0
    return {"drop_message": table, "reposition": repos}


def _condition(draw: st.DrawFn, depth: int) -> dict:
    """A random condition (nested at most two deep)."""
    kind = draw(st.sampled_from(["num", "role", "tool", "flag", "all", "any", "not"] if depth < 2
                                else ["num", "role", "tool", "flag"]))
    if kind == "num":
        f = draw(st.sampled_from(sorted(rules.NUMERIC)))
        return {"f": f, "op": draw(st.sampled_from([">=", "<"])), "param": f"p_{f}"}
    if kind == "role":
        return {"f": "role", "is": draw(st.sampled_from(rules.ROLES))}
    if kind == "tool":
        return {"f": "tool", "in": draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2, unique=True))}
    if kind == "flag":
        return {"f": draw(st.sampled_from(sorted(rules.FLAGS)))}
    if kind == "not":
        return {"not": _condition(draw, depth + 1)}
    return {kind: [_condition(draw, depth + 1) for _ in range(draw(st.integers(1, 3)))]}


@st.composite
def structures(draw: st.DrawFn) -> tuple[dict, dict]:
    rule_list = [{"action": draw(st.sampled_from(rules.ACTIONS)), "when": _condition(draw, 0)}
                 for _ in range(draw(st.integers(1, 4)))]
    structure = {"rules": rule_list, "reposition": draw(st.sampled_from([None, {"param": "rep"}]))}
    params = {name: draw(st.integers(0, 6)) if f != "tokens" else draw(st.integers(10, 300))
              for name, f in rules.params_of(structure).items()}
    if structure["reposition"]:
        params["rep"] = draw(st.integers(1, 300))
    return structure, params


@settings(max_examples=25, deadline=None)
@given(structures(), trajectories(max_steps=8))
def test_the_rendered_program_decides_as_the_grammar_says_at_every_request(drawn, traj):
    structure, params = drawn
    msgs, counts = traj
    source = rules.render(structure)
    assert check_program(source).ok, check_program(source).reason
    episode = Episode.of(msgs, counts)
    run = run_program(source, params, [episode])
    assert run.ok, run.reason
    for n, decision in zip(episode.cuts, run.decisions[0]):
        view = RequestView(msgs[:n], counts[:n])
        want = reference(structure, view, params)
        got = decision.wire
        assert {k: sorted(v) for k, v in got["drop_message"].items()} == want["drop_message"], n
        assert got["reposition"] == want["reposition"], n


BASES = [("rolling_drop", {"keep_tool_responses": 2}),
         ("rolling_drop", {"keep_tool_responses": 1, "target": "assistant_newest", "trigger": "tokens",
                           "trigger_tokens": 150, "target_tokens": 100, "reposition": "calls", "reposition_every": 2}),
         ("scored_drop", {})]


@settings(max_examples=20, deadline=None)
@given(structures(), st.sampled_from(BASES), trajectories(max_steps=8))
def test_rules_on_a_base_seed_decide_as_the_grammar_says_at_every_request(drawn, base, traj):
    structure, params = drawn
    seed, seed_params = base
    structure = {**structure, "base": {"seed": seed, "params": seed_params}}
    msgs, counts = traj
    source = rules.render(structure)
    assert check_program(source).ok, check_program(source).reason
    assert rules.read(source) is not None
    episode = Episode.of(msgs, counts)
    run, theirs = run_program(source, params, [episode]), run_program(seed_source(seed), seed_params, [episode])
    assert run.ok and theirs.ok, run.reason
    for n, decision, own in zip(episode.cuts, run.decisions[0], theirs.decisions[0]):
        want = reference(structure, RequestView(msgs[:n], counts[:n]), params, own.wire)
        assert {k: sorted(v) for k, v in decision.wire["drop_message"].items()} == want["drop_message"], n
        assert decision.wire["reposition"] == want["reposition"], n


def test_rolling_is_the_expert_and_reads_back():
    msgs = make_trajectory(14, 3)
    episodes = [Episode.of(msgs, estimate_tokens(msgs))]
    for k in (0, 2, 5):
        source = rules.render(rules.rolling(k))
        mine = run_program(source, {"r_keep": k}, episodes)
        theirs = get_policy("rolling_drop", keep_tool_responses=k).run_episodes(episodes)
        assert mine.ok and [d.wire for d in mine.decisions[0]] == [d.wire for d in theirs[0]]
        assert rules.read(source) == rules.rolling(k)
    assert rules.read(source.replace("return False", "return  False", 1)) is None  # edited: not ours any more
    assert rules.read("def decide(request, params):\n    return request.plan()\n") is None


@pytest.mark.parametrize(("structure", "match"), [
    ({"rules": []}, "1 to 12 rules"),
    ({"rules": [{"action": "hide", "when": {"f": "superseded"}}]}, r"rules\[0\]"),
    ({"rules": [{"action": "drop", "when": {"f": "colour"}}]}, "unknown feature 'colour'"),
    ({"rules": [{"action": "drop", "when": {"f": "tokens", "op": ">", "param": "x"}}]}, "numeric test"),
    ({"rules": [{"action": "drop", "when": {"f": "tokens", "op": ">=", "param": "__x"}}]}, "numeric test"),
    ({"rules": [{"action": "drop", "when": {"all": []}}]}, "non-empty list"),
    ({"rules": [{"action": "drop", "when": {"f": "tool", "in": ["a\nb"]}}]}, "tool test"),
    ({"rules": [{"action": "drop", "when": {"f": "role", "is": "robot"}}]}, "role test"),
    ({"rules": [{"action": "drop", "when": {"f": "superseded"}}], "reposition": {"param": 3}}, "reposition"),
    ({"rules": [{"action": "drop", "when": {"f": "superseded"}}], "extra": 1}, "a structure is"),
    ([1, 2], "a structure is"),
    ({"rules": [], "base": {"seed": "thinking_drop", "params": {}}}, "'base' is"),
    ({"rules": [], "base": {"seed": "rolling_drop"}}, "'base' is"),
    ({"rules": [], "base": {"seed": "rolling_drop", "params": {"k": [1]}}}, "base.params"),
    ({"rules": [], "base": {"seed": "rolling_drop", "params": {"__class__": 1}}}, "base.params"),
    ({"rules": [], "base": {"seed": "rolling_drop", "params": {"k": float("nan")}}}, "base.params"),
])
def test_structures_outside_the_grammar_are_refused_by_name(structure, match):
    with pytest.raises(rules.RuleError, match=match):
        rules.render(structure)


def test_a_hostile_tool_name_is_quoted_and_never_ends_the_docstring():
    name = 'x"""; import os; """\\'
    s = {"rules": [{"action": "drop", "when": {"f": "tool", "in": [name]}}], "reposition": None}
    source = rules.render(s)
    assert check_program(source).ok, check_program(source).reason
    msgs = make_trajectory(4, 1)
    for m in msgs:
        if m["role"] == "tool":
            m["name"] = name
    run = run_program(source, {}, [Episode.of(msgs, estimate_tokens(msgs))])
    assert run.ok and all(int(t) >= i for t, ids in run.decisions[0][-1].wire["drop_message"].items() for i in ids)
    assert any(run.decisions[0][-1].wire["drop_message"].values())


def test_the_description_reads_as_english():
    s = {"rules": [{"action": "drop", "when": {"all": [{"f": "role", "is": "assistant"}, {"f": "superseded"}]}},
                   {"action": "drop", "when": {"f": "role", "is": "tool"}}], "reposition": None}
    assert rules.describe(s) == ("drop if an assistant message and superseded; drop if a tool message; "
                                 "else keep")
