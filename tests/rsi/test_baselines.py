"""The baseline proposers and the claim protocol, without a model: random programs are checked
programs of the grammar with no parent, the hill climber keeps the better of two, and a pick that
changed after freezing is refused."""

from __future__ import annotations

import random

import pytest

from rsi.cache.archive import Archive, Candidate
from rsi.cache.baselines import HillClimbProposer, RandomProposer, incumbent, random_structure, tool_names
from rsi.cache.metrics import Metrics
from rsi.cache.protocol import Pick, ProtocolError, freeze, program_size, sha256, verify
from search_spaces import Episode, check_program, estimate_tokens, run_program, seed_source
from search_spaces.cache import rules
from tests.search_spaces.trajectories import recorded

EPISODES = [Episode.of(m, estimate_tokens(m)) for m in recorded()]


def test_random_programs_are_checked_runnable_grammar_programs_with_no_parent():
    p = RandomProposer(EPISODES)
    seen: set[str] = set()
    out = p.propose([], Archive(), 6, random.Random(5), seen)
    assert len(out) == 6 and len(seen) == 6
    for prop in out:
        assert prop.parents == () and prop.proposer == "random"
        assert check_program(prop.source).ok and run_program(prop.source, {}, EPISODES).ok
        structure = rules.read(prop.source)
        assert structure is not None and structure.get("base") is None and 1 <= len(structure["rules"]) <= 3
    # independent draws: the same seed draws the same programs; another seed others
    again = RandomProposer(EPISODES).propose([], Archive(), 6, random.Random(5), set())
    assert [q.source for q in again] == [q.source for q in out]
    other = RandomProposer(EPISODES).propose([], Archive(), 6, random.Random(6), set())
    assert {q.source for q in other} != {q.source for q in out}
    assert p.stats.valid == 6 and p.stats.attempts >= 6


def test_random_structures_cover_the_grammar():
    tools = tool_names(EPISODES)
    assert tools == ["search"]
    rng = random.Random(0)
    made = [random_structure(rng, tools) for _ in range(300)]
    leaves = {c.get("f") for s in made for c in rules.conditions(s)}
    assert set(rules.NUMERIC) | set(rules.FLAGS) | {"role", "tool"} <= leaves
    actions = [r["action"] for s in made for r in s["rules"]]
    assert {"drop", "keep"} == set(actions)
    for s in made:  # keep rules come first (a keep after a drop of the same target could never fire)
        kinds = [r["action"] for r in s["rules"]]
        assert kinds == sorted(kinds, key=lambda a: a != "keep")


def _m(pass_rate: float, cost: float) -> Metrics:
    return Metrics(pass_rate, cost, 2, 4)


def test_the_hill_climber_keeps_the_better_of_two():
    a = Archive()
    seed = a.add(Candidate("s", "prog-s", "seed:rolling_drop", {}, 0, train=_m(0.8, 1.0)))
    assert incumbent(a) is seed
    child = a.add(Candidate("c1", "prog-c1", "h1-p0", {}, 1, ("s",), "hillclimb", train=_m(0.8, 0.5)))
    assert incumbent(a) is child  # equal pass, cheaper: replaces the parent
    a.add(Candidate("c2", "prog-c2", "h2-p0", {}, 2, ("c1",), "hillclimb", train=_m(0.7, 0.1)))
    assert incumbent(a) is child  # cheaper but less accurate: does not
    a.add(Candidate("c3", "prog-c3", "h2-p1", {}, 2, ("c1",), "hillclimb", train=_m(0.8, 0.5)))
    assert incumbent(a) is child  # a tie keeps the earlier one
    a.add(Candidate("x", "prog-x", "g1-p0", {}, 1, ("s",), "synthesis:grow", train=_m(1.0, 0.01)))
    assert incumbent(a) is child  # another proposer's candidate is not the climb's


def test_the_hill_climber_edits_its_incumbent_one_step():
    a = Archive()
    best = a.add(Candidate("s", "rolling", "seed:rolling_drop", {"keep_tool_responses": 3}, 0, train=_m(0.9, 1.0)))
    a.add(Candidate("w", "other", "seed:scored_drop", {}, 0, train=_m(0.5, 0.2)))
    p = HillClimbProposer(EPISODES, {"rolling": seed_source("rolling_drop")}.__getitem__)
    out = p.propose([], a, 3, random.Random(2), set())
    assert out and all(prop.parents == (best.id,) and prop.proposer == "hillclimb" for prop in out)
    for prop in out:
        s = rules.read(prop.source)
        assert s is not None and s["base"] == {"seed": "rolling_drop", "params": {"keep_tool_responses": 3}}
        assert len(s["rules"]) == 1  # one step from the tuned seed: one rule added on top of it
    assert HillClimbProposer(EPISODES, str).propose([], Archive(), 2, random.Random(0), set()) == []


def test_program_size_counts_ast_nodes():
    assert program_size("x = 1\n") == 5  # Module, Assign, Name, Store, Constant
    assert program_size("def f(:\n") == 0
    assert program_size(seed_source("rolling_drop")) > program_size(seed_source("read_drop"))


PICKS = [Pick("a1", "g1-p0", "evolved", "program", sha256("src"), {"k": 1}, 10),
         Pick("e1", "expert:full", "comparator", "full", "", {}, 0)]


def test_a_pick_that_changed_after_freezing_is_refused(tmp_path):
    frozen = freeze(tmp_path, PICKS, ["t1", "t2"])
    assert freeze(tmp_path, PICKS, ["t1", "t2"]) == frozen  # a resumed run with the same picks goes on
    verify(frozen, "a1", "src")
    verify(frozen, "e1", None)
    with pytest.raises(ProtocolError, match=r"g1-p0 \(a1\): its program changed after it was frozen"):
        verify(frozen, "a1", "src edited")
    with pytest.raises(ProtocolError, match="not among the picks frozen"):
        verify(frozen, "zz", "src")
    changed = [Pick("a1", "g1-p0", "evolved", "program", sha256("src"), {"k": 2}, 10), PICKS[1]]
    with pytest.raises(ProtocolError, match=r"g1-p0 \(a1\) changed after it was frozen: params"):
        freeze(tmp_path, changed, ["t1", "t2"])
    other = [*PICKS, Pick("b2", "g2-p1", "evolved", "program", sha256("b"), {}, 5)]
    with pytest.raises(ProtocolError, match=r"g2-p1 \(b2\) was not frozen before held-out scoring"):
        freeze(tmp_path, other, ["t1", "t2"])
    with pytest.raises(ProtocolError, match="held-out tasks changed"):
        freeze(tmp_path, PICKS, ["t1", "t3"])
