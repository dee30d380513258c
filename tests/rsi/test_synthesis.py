"""The synthesis proposer and its hindsight: feature matrices against the program API, the gain of a
rule against a hand count, structures that are new and valid, behaviour duplicates counted."""

from __future__ import annotations

import random

import numpy as np
import pytest

from evals.tasks.mixed import generate_mixed_task
from rsi.cache.archive import Archive, Candidate
from rsi.cache.fingerprint import behaviour
from rsi.cache.hindsight import NEVER, Hindsight, TaskFeatures, drop_gain, drops_of, report, split_task
from rsi.cache.metrics import Metrics
from rsi.cache.synthesis import SynthesisProposer, as_structure
from rsi.proposers.base import ParentView
from search_spaces import Episode, estimate_tokens, run_program, seed_source
from search_spaces.cache import rules
from search_spaces.cache.program_api import RequestView
from tests.search_spaces.test_rules import feature


@pytest.fixture(scope="module")
def coding():
    tasks = [generate_mixed_task("coding-superseded-reads", "train", s, target_tokens=4500) for s in (1, 2)]
    episodes = [Episode.of(list(t.messages), estimate_tokens(list(t.messages))) for t in tasks]
    needed = tuple({e: t.probes[0].after_message for p in t.probes for e in p.evidence_ids} for t in tasks)
    return tasks, Hindsight(tuple(episodes), needed, "evidence")


def test_feature_matrices_equal_the_program_api(coding):
    _, h = coding
    ep = h.episodes[0]
    f = TaskFeatures(ep)
    view = RequestView(ep.messages, ep.token_counts)
    rng = random.Random(0)
    for _ in range(200):
        i = rng.randrange(f.n)
        t = rng.randrange(i, f.n)
        for name in ("age_tools", "age_calls", "tokens", "mentions", "mentions2", "batch_size", "batch_pos",
                     "task_overlap"):
            assert f.num[name][i, t] == feature(view, name, i, t), (name, i, t)
        sup = view.superseded_by(i)
        assert bool(f.num["superseded"][i, t]) == (0 <= sup <= t)


def test_drop_gain_counts_token_reads_by_hand(coding):
    _, h = coding
    f = TaskFeatures(h.episodes[0])
    cond = {"f": "superseded"}
    saved, harm = drop_gain([f], Hindsight(h.episodes[:1], h.needed[:1], "evidence"), [{}], cond, {})
    first = f.first_true(f.holds(cond, {}))
    want = sum(f.tokens[i] * (f.reads(i, NEVER) - f.reads(i, int(first[i]))) for i in range(f.n)
               if first[i] < NEVER and i not in h.needed[0])
    assert saved == pytest.approx(want) and saved > 0  # coding tasks re-read files: supersession saves reads
    assert harm == 0  # the evidence is the latest read of its file: never superseded
    assert split_task(f, h.needed[0], {}).harm == 0 and split_task(f, h.needed[0], {}).waste > 0
    # the request that prefills a message reads nothing of it from the cache; each later request does
    i = 3
    assert f.reads(i, NEVER) == int(np.sum(f.cuts > f.cuts[f.first_cut[i]]))


def _parent(source: str, params: dict) -> ParentView:
    m = Metrics(pass_rate=0.8, cost_cents_mean=1.0, n_tasks=2, n_probes=4)
    return ParentView(Candidate("p1", "sha", "seed:rolling_drop", params, 0, train=m), source, {})


def test_grow_adds_new_structure_that_runs_and_uses_the_hindsight(coding):
    _, h = coding
    p = SynthesisProposer(list(h.episodes[:1]), h, candidates=4)
    parent = _parent(seed_source("rolling_drop"), {"keep_tool_responses": 24})
    out = p.propose([parent], Archive(), 3, random.Random(1), set())
    assert len(out) == 3 and all(x.proposer.startswith("synthesis:") for x in out)
    for proposal in out:
        structure = rules.read(proposal.source)
        assert structure is not None and len(structure["rules"]) >= 1
        assert run_program(proposal.source, {}, list(h.episodes)).ok
    grown = [x for x in out if x.proposer == "synthesis:grow"]
    if grown:  # the hindsight's best drop rule on re-read files reads supersession or age
        assert any(w in grown[0].note for w in ("superseded", "age", "mentions", "tokens"))


def test_a_candidate_that_behaves_as_a_known_program_is_not_proposed(coding):
    _, h = coding
    smoke = list(h.episodes[:1])
    rule = {"action": "drop", "when": {"f": "superseded"}}
    twice = {"rules": [rule, rule], "reposition": None}  # the same rule twice: removing either decides the same
    parent_source = rules.render(twice)
    known = {behaviour(parent_source, {}, smoke)}
    p = SynthesisProposer(smoke, h, candidates=8, known=known)
    p.operators = ("prune",)
    out = p.propose([_parent(parent_source, {})], Archive(), 1, random.Random(3), set())
    assert out == []  # every pruned structure behaves as the parent
    assert p.stats.operators["prune"]["duplicates"] >= 2


TUNED = {"keep_tool_responses": 3, "reposition": "calls", "reposition_every": 2, "reposition_start": 1,
         "target": "assistant_newest", "target_tokens": 900, "trigger": "tokens", "trigger_tokens": 1200}


def test_reading_a_parent_as_a_structure(coding):
    """A seed that drops whole messages is the base of a structure with no rule, at its tuned
    parameters; another program is read as the expert; a rule program as itself."""
    for seed, params in (("rolling_drop", TUNED), ("scored_drop", {})):
        s = as_structure(seed_source(seed), params)
        assert s["rules"] == [] and s["base"] == {"seed": seed, "params": params}
    assert as_structure(seed_source("thinking_drop"), {})["rules"] == rules.rolling(12)["rules"]
    assert as_structure(seed_source("rolling_drop"), {"keep_tool_responses": [7]})["rules"] == \
           rules.rolling(12)["rules"]  # (parameters the grammar cannot carry: the expert)
    s = rules.render(rules.rolling(3))
    assert as_structure(s, {"r_keep": 9})["defaults"]["r_keep"] == 9


def test_children_of_a_tuned_seed_decide_as_it_wherever_no_rule_does(coding):
    """The tuned seed (a token trigger over assistant turns, repositions every two calls) read as a
    base decides exactly as the seed, request by request; a grown child drops a superset of what
    the seed drops and keeps every one of the seed's repositions."""
    _, h = coding
    episodes = list(h.episodes)
    seed = run_program(seed_source("rolling_drop"), TUNED, episodes)
    base = rules.render(as_structure(seed_source("rolling_drop"), TUNED))
    assert rules.read(base) is not None
    alone = run_program(base, {}, episodes)
    assert seed.ok and alone.ok and [[d.wire for d in ep] for ep in alone.decisions] == \
           [[d.wire for d in ep] for ep in seed.decisions]
    assert any(ep[-1].wire["reposition"] for ep in seed.decisions)
    p = SynthesisProposer(episodes[:1], h, candidates=4)
    p.operators = ("grow",)
    out = p.propose([_parent(seed_source("rolling_drop"), TUNED)], Archive(), 2, random.Random(3), set())
    assert out
    for proposal in out:
        child = run_program(proposal.source, {}, episodes)
        assert child.ok and rules.read(proposal.source)["base"]["params"] == TUNED
        for mine, theirs in zip(child.decisions, seed.decisions):
            assert set(drops_of(mine[-1].wire)) >= set(drops_of(theirs[-1].wire))
            assert set(mine[-1].wire["reposition"]) >= set(theirs[-1].wire["reposition"])


def test_the_report_names_harm_first(coding):
    _, h = coding
    fs = [TaskFeatures(e) for e in h.episodes]
    drop_all = [{i: i for i in range(f.n)} for f in fs]
    rows = report(h, drop_all, fs)
    assert rows[0]["harm"] >= rows[-1]["harm"] and rows[0]["dropped_but_needed"]
    keep_all = [{} for _ in fs]
    assert all(r["harm"] == 0 and r["kept_but_not_needed"] for r in report(h, keep_all, fs))
    assert drops_of({"drop_message": {"5": [1, 2], "7": [1]}}) == {1: 5, 2: 5}


@pytest.mark.parametrize("after_pass, kept", [(1.0, True), (0.5, False)])
def test_the_model_check_of_the_chains_last_step_keeps_it_only_when_no_probe_is_lost(coding, after_pass, kept):
    """``check`` (the model on a few train tasks) sees the program before the chain's last step and
    after it; a step that loses a probe there is undone, one that loses none is kept (issue 41)."""
    _, h = coding
    calls: list[tuple[str, dict]] = []

    def check(source, params):
        calls.append((source, dict(params)))
        return (1.0, 1.0) if len(calls) % 2 == 1 else (1.0, after_pass)

    p = SynthesisProposer(list(h.episodes[:1]), h, screen=lambda s, q: (1.0, 1.0), candidates=4, inner=3,
                          check=check)
    parent = _parent(seed_source("rolling_drop"), {"keep_tool_responses": 24})
    out = p.propose([parent], Archive(), 2, random.Random(5), set())
    assert out and calls and len(calls) == 2 * len(p.stats.checks)
    assert all(c["kept"] is kept for c in p.stats.checks)
    checked = {calls[2 * k + 1][0]: calls[2 * k][0] for k in range(len(p.stats.checks))}  # after -> before
    for proposal in out:
        if kept:
            assert proposal.source in checked and "model check undid" not in proposal.note
        else:
            assert proposal.source in checked.values() and "model check undid" in proposal.note
