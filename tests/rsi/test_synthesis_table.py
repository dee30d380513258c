"""The synthesis proposer's ``table`` operator: a rule program read off the hindsight, checked by
running it against the table's own definition (which cells are dropped, when, and that no needed
evidence is), and the hindsight's alternatives against the evidence rule."""

from __future__ import annotations

import random

import pytest

from evals.cache.evaluator import EvalConfig, PolicySpec
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay, evidence_split
from evals.cache.table_bound import LENGTH_EDGES, Cell, cheapest_cover, length_bucket
from evals.tasks.mixed import generate_mixed_task
from rsi.cache.archive import Archive, Candidate
from rsi.cache.hindsight import NEVER, Hindsight, TaskFeatures, build_hindsight, drops_of, hindsight_table
from rsi.cache.metrics import Metrics
from rsi.cache.synthesis import SynthesisProposer, table_structure
from rsi.proposers.base import ParentView
from search_spaces import Episode, estimate_tokens, run_program, seed_source
from search_spaces.cache import rules

KINDS = ("coding-superseded-reads", "ops-long-logs", "research-redundant-pages")


@pytest.fixture(scope="module")
def mixed():
    tasks = [generate_mixed_task(k, "train", s, target_tokens=4500) for k in KINDS for s in (1, 2)]
    episodes = [Episode.of(list(t.messages), estimate_tokens(list(t.messages))) for t in tasks]
    needed, alternatives = [], []
    for t in tasks:
        last = max(p.after_message for p in t.probes)
        needed.append({e: last for p in t.probes for e in p.evidence_ids})
        sets = []
        for i in range(len(t.probes)):
            copies, hops = evidence_split(t, i)
            sets += [frozenset({h}) for h in hops] + ([copies] if copies else [])
        alternatives.append(tuple(sets))
    return tasks, Hindsight(tuple(episodes), tuple(needed), "evidence", tuple(alternatives))


def _parent() -> ParentView:
    m = Metrics(pass_rate=0.8, cost_cents_mean=1.0, n_tasks=2, n_probes=4)
    return ParentView(Candidate("p1", "sha", "seed:rolling_drop", {"keep_tool_responses": 12}, 0, train=m),
                      seed_source("rolling_drop"), {})


def _cell(f: TaskFeatures, i: int, tools: bool) -> Cell:
    return Cell(f.role[i], f.tool[i] if tools else "", length_bucket(int(f.tokens[i])))


def test_the_table_program_drops_exactly_its_cells_once_read_and_keeps_every_need(mixed):
    _, h = mixed
    p = SynthesisProposer(list(h.episodes[:1]), h, candidates=4)
    made = p._table()
    assert [("tool" in note.split("over")[1]) for _, note in made] == [True, False]
    features = [TaskFeatures(e) for e in h.episodes]
    for (structure, _), tools in zip(made, (True, False)):
        source = rules.render(structure)
        run = run_program(source, {}, list(h.episodes))
        assert run.ok
        dropped_cells = {_cell(f, i, tools) for f, ep in zip(features, run.decisions) for i in drops_of(ep[-1].wire)}
        for k, (f, ep) in enumerate(zip(features, run.decisions)):
            drops = drops_of(ep[-1].wire)
            for i in range(f.n):
                cell = _cell(f, i, tools)
                if cell in dropped_cells:
                    # the table's rule: an assistant message at itself, any other once an assistant turn read it
                    want = i if f.role[i] == "assistant" else next(
                        (j for j in range(i + 1, f.n) if f.role[j] == "assistant"), None)
                    assert drops.get(i) == want, (k, i, cell)
                else:
                    assert i not in drops
            for need in h.needs(k):  # every needed hop, and a copy of every probe, stays attended
                assert any(m not in drops for m in need), (k, sorted(need))


def test_the_table_is_the_cheapest_cover_in_token_reads(mixed):
    """Its kept cells cost no more token reads than any other cover the brute force finds, here the
    one that keeps every cell that holds a needed message."""
    _, h = mixed
    features = [TaskFeatures(e) for e in h.episodes]
    cells = [[_cell(f, i, True) for i in range(f.n)] for f in features]
    cost: dict[Cell, float] = {}
    for f, cs in zip(features, cells):
        for i in range(f.n):
            read = i if f.role[i] == "assistant" else next((j for j in range(i + 1, f.n) if f.role[j] == "assistant"),
                                                           NEVER)
            cost[cs[i]] = cost.get(cs[i], 0.0) + f.tokens[i] * (f.reads(i, NEVER) - f.reads(i, read))
    needs = [frozenset(cells[k][m] for m in need) for k in range(len(features)) for need in h.needs(k)]
    kept, exact = cheapest_cover(needs, cost)
    naive = {c for need in needs for c in need}
    assert exact and sum(cost[c] for c in kept) <= sum(cost[c] for c in naive) + 1e-9
    table = hindsight_table(h, features)  # (what the operator and the LLM prompt read)
    assert table.kept == kept and table.cost == pytest.approx(cost)
    structure = table_structure({c: v for c, v in cost.items() if c not in kept}, True)
    assert structure is not None and rules.read(rules.render(structure)) is not None
    assert set(structure["defaults"]) <= {"tab_read", *(f"tab_len{e}" for e in LENGTH_EDGES)}


def test_a_table_never_drops_a_cell_it_did_not_see():
    dropped = {Cell("tool", "read_file", "<100"): 5.0, Cell("tool", "read_file", "300-999"): 9.0,
               Cell("assistant", "", "<100"): 1.0, Cell("user", "", ">=1000"): 2.0}
    s = table_structure(dropped, True)
    words = rules.describe(s)
    assert "read_file" in words and "tab_len100" in words and "tab_len300" in words
    # read_file of 100-299 tokens sits between the two dropped lengths: no rule may match it
    for rule in s["rules"]:
        parts = rule["when"]["all"] if "all" in rule["when"] else [rule["when"]]
        if {"f": "role", "is": "tool"} in parts:
            ops = {(c["op"], c["param"]) for c in parts if c.get("f") == "tokens"}
            assert ops in ({("<", "tab_len100")}, {(">=", "tab_len300"), ("<", "tab_len1000")})
    assert table_structure({}, True) is None


def test_the_operator_comes_first_and_needs_the_hindsight(mixed):
    _, h = mixed
    p = SynthesisProposer(list(h.episodes[:1]), h, candidates=4)
    out = p.propose([_parent()], Archive(), 1, random.Random(0), set())
    assert len(out) == 1 and out[0].proposer == "synthesis:table" and "table over" in out[0].note
    assert SynthesisProposer(list(h.episodes[:1]), None, candidates=4)._table() == []


def test_built_hindsight_carries_every_copy_as_one_alternative():
    tasks = [generate_mixed_task("research-redundant-pages", "train", s, target_tokens=3000) for s in (3,)]
    dry = DryEngine.load("tiny-random", "plain")
    proxy = ProxyReplay(dry, EvidenceTable.assumed(tasks), EvalConfig(generate=False))
    fulls = [proxy.evaluate(PolicySpec("full"), t) for t in tasks]
    episodes = [Episode.of(list(t.messages), dry.render(list(t.messages)).message_tokens) for t in tasks]
    h = build_hindsight(tasks, episodes, fulls, lambda spec, t: proxy.cost(spec, t).cents)
    want = []
    for i in range(len(tasks[0].probes)):
        copies, hops = evidence_split(tasks[0], i)
        want += [frozenset({m}) for m in sorted(hops)] + ([copies] if copies else [])
    assert h.needs(0) == tuple(dict.fromkeys(want))
    assert all(any(m in h.needed[0] for m in need) for need in h.needs(0))  # the start keeps one of each
    both = h + Hindsight(h.episodes, h.needed, "evidence")  # a view without alternatives: its needed, alone
    assert both.needs(1) == tuple(frozenset({m}) for m in sorted(h.needed[0]))
