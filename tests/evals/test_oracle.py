"""The hindsight oracle and the rolling-drop bounds: costs, the greedy against exact search, the
store check, on the tiny random model (fast) and on gemma-3-270m (``slow``)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace

import pytest

from evals.cache.bounds import per_task_rolling, rolling_grid, single_setting
from evals.cache.cost import CostBreakdown
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, ProbeOutcome, ProxyReplay, evidence_split
from evals.cache.headroom import measure_headroom, pessimistic_proxy
from evals.cache.oracle import OracleConfig, Problem, exact, failing, greedy, hindsight, violations
from evals.tasks import Probe, Task, load_suite
from tests.search_spaces.trajectories import build

CONFIG = EvalConfig(generate=False)


def small_task(seed: int = 5) -> Task:
    """Three rounds, six two-candidate probes at the end, each with one evidence message."""
    msgs = build(["call", "call", "call"], [True, False], words=3, seed=seed)
    tools = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
    probes = []
    for j, t in enumerate(tools * 2):
        words = msgs[t]["content"].split()
        answer, other = words[1 + j % 2], words[-1]
        if answer == other:
            other = "Oslo"
        probes.append(Probe(len(msgs) - 1, f"q{j}", answer, "", (answer, other), (t,)))
    return Task(f"oracle/small-{seed}", tuple(msgs), tuple(probes))


def all_pass(replay: Replay, task: Task) -> TaskResult:
    """A zero-forward stand-in for the full cache's result in which every probe passed (for the
    tests of costs and of the evidence rule, which need no model)."""
    table = EvidenceTable({(task.id, i): ProbeOutcome(True, False) for i in range(len(task.probes))})
    return ProxyReplay(DryEngine.of(replay.engine), table, CONFIG).evaluate(PolicySpec("full"), task)


@pytest.fixture(scope="module")
def replay(eng) -> Replay:
    return Replay(eng, CONFIG)


def _coster(replay: Replay):
    return lambda spec, task: replay.cost(spec, task).cents


def test_cost_is_additive_over_kept_messages(replay, tasks):
    task = tasks[0]
    full = all_pass(replay, task)
    problem = Problem(task, full, _coster(replay))
    rng = random.Random(3)
    for _ in range(8):
        kept = rng.sample(problem.units, rng.randint(0, len(problem.units)))
        assert problem.cost(kept) == pytest.approx(replay.cost(problem.spec(kept), task).cents, rel=1e-12, abs=1e-12)
    everything = problem.cost(problem.units)
    assert problem.base <= everything <= full.cost_cents * (1 + 1e-12)  # keeping all costs what the full cache does


def test_the_schedule_keeps_what_it_says_until_the_last_probe(replay, tasks):
    task = tasks[0]
    problem = Problem(task, all_pass(replay, task), _coster(replay))
    kept = {problem.units[-1], 1}
    table = problem.schedule(kept)["drop_message"]
    dropped_at = {i: int(t) for t, ids in table.items() for i in ids}
    for m in range(len(task.messages)):
        if m in kept:
            assert dropped_at.get(m, len(task.messages)) > problem.last_probe
        else:
            assert dropped_at[m] == problem.read_at[m] >= m  # dropped once read
            if task.messages[m]["role"] != "assistant" and m < problem.read_at[m]:
                assert task.messages[problem.read_at[m]]["role"] == "assistant"


def test_greedy_passes_every_required_probe_and_exact_is_never_dearer(eng):
    replay = Replay(eng, CONFIG)
    task = small_task()
    full = replay.evaluate(PolicySpec("full"), task)
    problem = Problem(task, full, _coster(replay))
    assert problem.required, "the fixture needs a probe the tiny model passes with the full cache"
    g = greedy(problem, replay.evaluate, budget=12)
    e = exact(problem, replay.evaluate, budget=300)
    for r in (g, e):
        assert not failing(r.result, problem.required)
        assert r.cost_cents <= full.cost_cents * (1 + 1e-12)
    assert e.complete and e.cost_cents <= g.cost_cents * (1 + 1e-12)
    # exact tried every cheaper subset and each failed a required probe
    cheaper = [s for s in e.steps[:-1]]
    assert all(not s.passed and s.cost_cents <= e.cost_cents + 1e-12 for s in cheaper)
    assert hindsight(task, full, replay.evaluate, _coster(replay), OracleConfig(exact_max=10)).method == "exact"


def test_under_the_evidence_rule_greedy_and_exact_find_the_closed_form(replay, tasks):
    """A judge that passes a probe exactly when its evidence is attended (the proxy's rule with a
    dropped-evidence probe failing): the cheapest schedule is then the cheapest choice of one copy
    per probe plus every hop, found here by brute force over the copy choices."""
    for task in tasks[:2]:
        full = all_pass(replay, task)
        proxy = pessimistic_proxy(DryEngine.of(replay.engine), [full], CONFIG)
        problem = Problem(task, full, _coster(replay))
        splits = [evidence_split(task, i) for i in problem.required]
        choices = [sorted(c) or [None] for c, _ in splits]
        best = min(problem.cost({*[m for m in pick if m is not None], *(h for _, hs in splits for h in hs)})
                   for pick in itertools.product(*choices))
        g = greedy(problem, proxy.evaluate, budget=40)
        assert g.cost_cents == pytest.approx(best, rel=1e-9)
        if len(problem.units) <= 12:
            assert exact(problem, proxy.evaluate).cost_cents == pytest.approx(best, rel=1e-9)


def test_a_stored_result_cheaper_than_the_oracle_is_a_violation(replay):
    task = small_task()
    full = replay.evaluate(PolicySpec("full"), task)
    problem = Problem(task, full, _coster(replay))
    assert problem.required
    o = greedy(problem, replay.evaluate, budget=3)
    cheap = replace(o.result, policy="cheap", cost=CostBreakdown(input=o.result.cost.total * 0.5))
    assert [v.policy for v in violations([o], [cheap, full])] == ["cheap"]
    worse = replace(cheap, probes=tuple(replace(p, passed=False) for p in cheap.probes))
    assert violations([o], [worse]) == []  # cheaper, but it fails a probe the full cache passes


def test_bounds_pass_every_required_probe_and_order(replay):
    tasks = [small_task(5), small_task(6)]
    fulls = [replay.evaluate(PolicySpec("full"), t) for t in tasks]
    proxy = pessimistic_proxy(DryEngine.of(replay.engine), fulls, CONFIG)
    grid = rolling_grid((0, 1, 2))
    per_task = [per_task_rolling(t, f, replay.evaluate, proxy.evaluate, grid, budget=3) for t, f in zip(tasks, fulls)]
    for b, full in zip(per_task, fulls):
        assert not failing(b.result, [p.index for p in full.probes if p.passed])
        assert b.result.cost_cents <= full.cost_cents * (1 + 1e-12)
    one = single_setting(tasks, fulls, replay.evaluate, proxy.evaluate, grid, budget=2)
    assert len(one.results) == 2
    for r, full in zip(one.results, fulls):
        assert not failing(r, [p.index for p in full.probes if p.passed])
    # choosing per task can only be cheaper than one setting for all (when both found one)
    if one.params is not None and all(b.params is not None for b in per_task):
        assert sum(b.result.cost_cents for b in per_task) <= sum(r.cost_cents for r in one.results) * (1 + 1e-12)


def test_headroom_is_serialisable_and_orders_its_totals(replay):
    h = measure_headroom([small_task(7)], replay.evaluate, DryEngine.of(replay.engine), CONFIG,
                         OracleConfig(budget=3), bound_budget=2, single_budget=1, grid=rolling_grid((0, 2)))
    d = json.loads(json.dumps(h.to_dict()))
    t = d["totals_cents"]
    assert t["oracle"] <= t["full"] * (1 + 1e-12) and t["per_task_rolling"] <= t["full"] * (1 + 1e-12)
    assert len(d["tasks"]) == 1 and d["model_evaluations"] >= 2


@pytest.mark.parametrize("kwargs", [{"budget": 0}, {"exact_max": 21}, {"budget": True}, {"exact_budget": -1}])
def test_bad_oracle_configs_are_refused(kwargs):
    from evals.errors import TaskError

    with pytest.raises(TaskError, match=next(iter(kwargs))):
        OracleConfig(**kwargs)


@pytest.mark.slow
def test_on_gemma_the_oracle_passes_what_the_full_cache_passes_and_no_policy_beats_it():
    from tests.conftest import get_engine

    eng = get_engine("gemma-3-270m", template="plain")
    replay = Replay(eng, CONFIG)
    task = load_suite("smoke", "train")[0]
    full = replay.evaluate(PolicySpec("full"), task)
    o = hindsight(task, full, replay.evaluate, _coster(replay), OracleConfig(budget=6))
    assert o.required and not failing(o.result, o.required)
    assert o.cost_cents < full.cost_cents  # the evidence of a smoke task is a small part of it
    others = [replay.evaluate(PolicySpec("rolling_drop", {"keep_tool_responses": k}), task) for k in (0, 1, 2)]
    assert violations([o], [full, *others]) == []


def test_akv_oracle_writes_the_headroom_of_a_task_file(tmp_path, capsys):
    from evals.tasks import save_jsonl
    from rsi.cli import main

    tasks = save_jsonl([small_task(5)], tmp_path / "tasks.jsonl")
    out = tmp_path / "oracle.json"
    status = main(["oracle", "--suite", str(tasks), "--model", "tiny-random", "--budget", "2", "--bound-budget",
                   "1", "--single-budget", "1", "--out", str(out)])
    assert status == 0
    d = json.loads(out.read_text())
    assert d["split"] == "all" and [t["task_id"] for t in d["tasks"]] == ["oracle/small-5"]
    o = d["tasks"][0]["oracle"]
    assert o["evaluations"] <= 2 and set(o["required"]) <= set(o["passed"])
    assert "hindsight oracle" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "words"), [
    (["--budget", "0"], ("--budget", ">= 1")),
    (["--exact-max", "25"], ("exact_max", "at most 20")),
    (["--bound-budget", "-1"], ("--bound-budget",)),
    (["--check", "/nonexistent-run"], ("--check", "evaluations.jsonl")),
    (["--suite", "no-such-suite"], ("no-such-suite",)),
])
def test_akv_oracle_refuses_bad_input_in_one_line(tmp_path, capsys, flags, words):
    from rsi.cli import main

    status = main(["oracle", "--model", "tiny-random", "--out", str(tmp_path / "o.json"), *flags])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and all(w in err for w in words), err
    assert not (tmp_path / "o.json").exists()
