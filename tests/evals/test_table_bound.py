"""The probe-blind rule table chosen with hindsight: the cover against brute force, the costs against
the accountant, the schedule against its definition, and the bound between the oracle and the full
cache (tiny random model; no timing)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.cache.fidelity import DryEngine, evidence_split
from evals.cache.headroom import measure_headroom, pessimistic_proxy
from evals.cache.oracle import OracleConfig, Problem, failing, greedy, schedule_spec
from evals.cache.table_bound import (
    Cell,
    apply_table,
    cell_of,
    cheapest_cover,
    choose_table,
    keep_costs,
    read_once_schedule,
    table_bound,
    table_schedule,
)
from evals.tasks import Task
from tests.evals.test_oracle import all_pass, small_task

CONFIG = EvalConfig(generate=False)


@pytest.fixture(scope="module")
def replay(eng) -> Replay:
    return Replay(eng, CONFIG)


def _tokens(replay: Replay):
    return lambda task: replay.engine.render(list(task.messages)).message_tokens


def _brute_force(needs, cost):
    cells = sorted({c for n in needs for c in n})
    best = None
    for k in range(len(cells) + 1):
        for pick in itertools.combinations(cells, k):
            chosen = set(pick)
            if all(n & chosen for n in needs):
                spent = sum(cost[c] for c in chosen)
                best = spent if best is None else min(best, spent)
    return best


@pytest.mark.parametrize("seed", range(25))
def test_the_cover_is_the_cheapest_by_brute_force(seed):
    rng = random.Random(seed)
    cells = [Cell("tool", f"t{i}", "<100") for i in range(rng.randint(2, 9))]
    cost = {c: round(rng.uniform(0.0, 5.0), 3) for c in cells}
    needs = [frozenset(rng.sample(cells, rng.randint(1, min(3, len(cells))))) for _ in range(rng.randint(0, 10))]
    chosen, exact = cheapest_cover(needs, cost)
    assert exact and all(n & chosen for n in needs)
    assert sum(cost[c] for c in chosen) == pytest.approx(_brute_force(needs, cost) or 0.0, abs=1e-9)


def test_a_cut_search_still_meets_every_need_and_says_so():
    cells = [Cell("tool", f"t{i}", "<100") for i in range(12)]
    needs = [frozenset({a, b}) for a, b in itertools.combinations(cells, 2)]
    chosen, exact = cheapest_cover(needs, {c: 1.0 for c in cells}, node_limit=5)
    assert not exact and all(n & chosen for n in needs)


def test_a_need_no_cell_can_meet_is_refused():
    with pytest.raises(ValueError, match="without any cell"):
        cheapest_cover([frozenset()], {})


def test_cells_read_only_what_a_policy_sees():
    assert cell_of({"role": "tool", "name": "sql_query", "content": "x"}, 99) == Cell("tool", "sql_query", "<100")
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                                "function": {"name": "grep", "arguments": "{}"}}]}
    assert cell_of(call, 100) == Cell("assistant", "grep", "100-299")
    assert cell_of({"role": "developer", "content": "x"}, 5000) == Cell("system", "", ">=1000")
    # hostile shapes of tool_calls never raise: the cell just has no tool
    assert cell_of({"role": "assistant", "content": "", "tool_calls": ["junk"]}, 1).tool == ""
    assert str(Cell("user", "", "300-999")) == "user:-:300-999"


def test_the_schedule_keeps_kept_cells_for_good_and_drops_the_rest_once_read(replay, tasks):
    task = tasks[0]
    cells = [cell_of(m, n) for m, n in zip(task.messages, _tokens(replay)(task))]
    kept = {cells[1], cells[-1]}
    dropped_at = {i: int(t) for t, ids in table_schedule(task, cells, kept)["drop_message"].items() for i in ids}
    problem = Problem(task, all_pass(replay, task), lambda s, t: 0.0)
    for m, cell in enumerate(cells):
        if cell in kept:
            assert m not in dropped_at  # probe-blind: never dropped, whatever the probes ask
        else:
            assert dropped_at[m] == problem.read_at[m]  # the oracle's read lifetime


def test_keeping_costs_are_additive_over_messages(replay, tasks):
    task = tasks[1]
    coster = lambda spec, t: replay.cost(spec, t).cents  # noqa: E731
    none, adds = keep_costs(task, coster)
    rng = random.Random(4)
    for _ in range(6):
        keep = rng.sample(range(len(task.messages)), rng.randint(0, len(task.messages)))
        whole = coster(schedule_spec(read_once_schedule(task, keep)), task)
        assert whole == pytest.approx(none + sum(adds[m] for m in keep), rel=1e-12, abs=1e-12)
    assert all(a >= -1e-12 for a in adds)


def test_under_the_evidence_rule_the_table_passes_and_lies_between_the_oracle_and_the_full_cache(replay, tasks):
    """With a judge that passes a probe exactly when its evidence is attended, the table passes every
    probe, costs what its cells add up to, is never cheaper than the oracle (which may keep single
    messages) and never dearer than the full cache; and it is probe-blind: every message of a kept
    cell is kept on every task."""
    fulls = [all_pass(replay, t) for t in tasks]
    proxy = pessimistic_proxy(DryEngine.of(replay.engine), fulls, CONFIG)
    coster = lambda spec, t: proxy.cost(spec, t).cents  # noqa: E731
    tb = table_bound(tasks, fulls, proxy.evaluate, coster, _tokens(replay))
    assert tb.exact and tb.tasks_failing == ()
    assert tb.cost_cents == pytest.approx(tb.predicted_cents, rel=1e-9)
    oracle = sum(greedy(Problem(t, f, coster), proxy.evaluate, budget=40).cost_cents for t, f in zip(tasks, fulls))
    assert oracle <= tb.cost_cents * (1 + 1e-9)
    assert tb.cost_cents <= sum(f.cost_cents for f in fulls) * (1 + 1e-9)
    for task, result in zip(tasks, tb.results):
        cells = [cell_of(m, n) for m, n in zip(task.messages, _tokens(replay)(task))]
        for i in range(len(task.probes)):
            copies, hops = evidence_split(task, i)
            assert {cells[h] for h in hops} <= set(tb.kept)
            assert not copies or {cells[c] for c in copies} & set(tb.kept)
        assert not failing(result, range(len(task.probes)))


def test_a_task_with_no_probe_keeps_nothing(replay, tasks):
    task = Task("table/no-probes", tasks[0].messages, ())
    full = all_pass(replay, task)
    proxy = pessimistic_proxy(DryEngine.of(replay.engine), [full], CONFIG)
    tb = table_bound([task], [full], proxy.evaluate, lambda s, t: proxy.cost(s, t).cents, _tokens(replay))
    assert tb.kept == () and tb.cost_cents == pytest.approx(
        replay.cost(schedule_spec(read_once_schedule(task, ())), task).cents)


def test_the_model_is_asked_and_its_failures_are_named(replay):
    """On the tiny random model: one evaluation per task, the model's own results, and a probe the
    model fails under the table (its evidence rule said pass) is reported, not hidden."""
    tasks = [small_task(5), small_task(6)]
    fulls = [replay.evaluate(PolicySpec("full"), t) for t in tasks]
    calls = []

    def judge(spec, task):
        calls.append(spec.name)
        return replay.evaluate(spec, task)

    tb = table_bound(tasks, fulls, judge, lambda s, t: replay.cost(s, t).cents, _tokens(replay))
    assert calls == ["schedule", "schedule"]
    for r, t, f in zip(tb.results, tasks, fulls):
        assert r.task_id == t.id and r.fidelity == "model"
        assert (t.id in tb.tasks_failing) == bool(failing(r, [p.index for p in f.probes if p.passed]))
    d = json.loads(json.dumps(tb.to_dict()))
    assert d["evaluations"] == 2 and set(d["kept"]) <= set(d["cells"])


def test_the_headroom_carries_the_table(replay):
    task = small_task(7)
    h = measure_headroom([task], replay.evaluate, DryEngine.of(replay.engine), CONFIG, OracleConfig(budget=2),
                         bound_budget=1, single_budget=1)
    d = json.loads(json.dumps(h.to_dict()))
    assert d["rule_table"]["evaluations"] == 1 and "rule_table" in d["totals_cents"]
    off = measure_headroom([task], replay.evaluate, DryEngine.of(replay.engine), CONFIG, OracleConfig(budget=2),
                           bound_budget=1, single_budget=1, table=False)
    assert off.table is None and "rule_table" not in off.totals()


def test_a_hop_forces_its_cell_even_when_it_is_the_dearest():
    """A need of one cell (a hop's) is met by that cell, however dear; a copy's need it meets too."""
    a, b = Cell("tool", "a", "<100"), Cell("tool", "b", ">=1000")
    chosen, _ = cheapest_cover([frozenset({b}), frozenset({a, b})], {a: 0.1, b: 9.0})
    assert chosen == frozenset({b})


def test_a_table_chosen_on_other_tasks_keeps_the_cells_it_never_saw(replay, tasks):
    """Chosen on two tasks, run on a third: a cell the choice never saw is kept (it cannot be judged),
    a seen cell is kept exactly when the choice keeps it; role-and-length cells ignore the tool."""
    fulls = [all_pass(replay, t) for t in tasks]
    proxy = pessimistic_proxy(DryEngine.of(replay.engine), fulls, CONFIG)
    coster = lambda spec, t: proxy.cost(spec, t).cents  # noqa: E731
    for tools in (True, False):
        choice = choose_table(tasks[:2], fulls[:2], coster, _tokens(replay), tools=tools)
        unseen = Cell("tool", "never_called", "<100") if tools else Cell("tool", "", ">=1000")
        assert choice.keeps(unseen) == (unseen not in choice.seen)
        asked = []

        def judge(spec, task, asked=asked):
            asked.append(spec.params["drop_message"])
            return proxy.evaluate(spec, task)

        out = apply_table(choice, tasks[2:], fulls[2:], judge, _tokens(replay))
        assert not out.hindsight and out.evaluations == 1
        cells = choice.cells(tasks[2], _tokens(replay)(tasks[2]))
        assert tools or all(c.tool == "" for c in cells)
        dropped = sorted(i for ids in asked[0].values() for i in ids)
        assert dropped == [m for m, c in enumerate(cells) if c in choice.seen and c not in choice.kept]
