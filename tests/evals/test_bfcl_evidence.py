"""evals.bfcl.evidence, .controls and .headroom: each BFCL turn's evidence by the stated rule, the turns
as probes, the two controls' drops (in the judge, with the gold replayed: every turn passes), the
negative controls of rolling drop, and the headroom by the project's accounting (no model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from evals.bfcl import GoldResponder, JudgeConfig, judge, summarize
from evals.bfcl.controls import TurnControl, turn_drops
from evals.bfcl.data import read_entries, to_task
from evals.bfcl.evidence import PROBE_KIND, as_probe_task, turn_evidence
from evals.bfcl.headroom import keep_evidence_schedule, read_at, suite_headroom
from evals.bfcl.judge import TaskJudgement, TurnResult
from evals.cache.evaluator import PolicySpec, Replay
from evals.cache.fidelity import DryEngine
from evals.errors import TaskError
from evals.tasks.schema import Task


@pytest.fixture(scope="module")
def engine():
    from engine import Engine
    from tests.conftest import get_engine

    base = get_engine("tiny-random")
    return Engine(base.model, base.tokenizer, "chatml", name=base.name)


def _trimmed(entry_id: str, turns: int) -> Task:
    """A real BFCL task cut to its first ``turns`` turns, declaring only the functions its gold calls."""
    entry = next(e for e in read_entries("multi_turn_base") if e.id == entry_id)
    entry = replace(entry, turns=entry.turns[:turns], gold=entry.gold[:turns])
    used = {c.split("(")[0] for turn in entry.gold for c in turn}
    unused = tuple(t["function"]["name"] for t in to_task(entry).tools if t["function"]["name"] not in used)
    return to_task(replace(entry, excluded=entry.excluded + unused))


@pytest.fixture(scope="module")
def evidence_tasks() -> list[Task]:
    """Two short real tasks with evidence: base_26 (turn 1 reads a listing; one other output before it)
    and base_4 (turn 1's only earlier output is its evidence: drop_other has nothing to drop)."""
    return [_trimmed("multi_turn_base_26", 3), _trimmed("multi_turn_base_4", 2)]


def _call(i: str, fn: str, **args) -> dict:
    return {"id": i, "type": "function", "function": {"name": fn, "arguments": json.dumps(args)}}


def _made_up() -> Task:
    """Three turns whose values test each part of the rule (see the asserts)."""
    messages = [
        {"role": "system", "content": "You call functions.", "tools": [{"type": "function", "function": {
            "name": "cat", "description": "Print a file, e.g. notes.txt", "parameters": {}}}]},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "", "tool_calls": [_call("c0", "ls")]},
        {"role": "tool", "tool_call_id": "c0", "content": json.dumps(
            {"files": ["secret_42.csv", "beta.md", "notes.txt", "temperature.log", "Gamma.txt"], "price": 42.5})},
        {"role": "user", "content": "Open the csv, and beta.md."},  # turn 1
        {"role": "assistant", "content": "", "tool_calls": [
            _call("c1", "cat", file_name="secret_42.csv"), _call("c2", "cat", file_name="beta.md"),
            _call("c3", "cat", file_name="notes.txt"), _call("c4", "flag", on=True, x="ab"),
            _call("c5", "buy", price=42.5, items=["temp", "gamma.txt"])]},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"} for i in range(1, 6)),
        {"role": "user", "content": "Find the log and read it again."},  # turn 2
        {"role": "assistant", "content": "", "tool_calls": [
            _call("c6", "find", name="log"), _call("c7", "cat", file_name="temperature.log"),
            _call("c8", "cat", file_name="secret_42.csv")]},
        {"role": "tool", "tool_call_id": "c6", "content": '{"found": "temperature.log"}'},
        {"role": "tool", "tool_call_id": "c7", "content": "ok"},
        {"role": "tool", "tool_call_id": "c8", "content": "ok"},
    ]
    meta = {"bfcl": {"id": "made_up", "category": "multi_turn_base", "initial_config": {}, "involved_classes": [],
                     "excluded_function": [], "gold": [["ls()"], ["cat()"], ["find()"]], "turn_starts": [1, 4, 11],
                     "split_rule": ""}}
    return Task(id="made_up", messages=tuple(messages), probes=(), family="multi_turn_base", meta=meta)


def test_the_evidence_rule_on_a_made_up_task():
    t0, t1, t2 = turn_evidence(_made_up())
    assert (t0.cut, t0.outputs_before, t0.matches) == (2, (), ())
    assert t1.cut == 5 and t1.outputs_before == (3,)
    # secret_42.csv and 42.5 only the listing holds; beta.md is in the question, notes.txt in the tool
    # spec; True and "ab" are skipped; "temp" is not found inside "temperature"; "gamma.txt" not in "Gamma.txt"
    assert [(m.call, m.argument, m.value, m.outputs) for m in t1.matches] == [
        ("cat", "file_name", "secret_42.csv", (3,)), ("buy", "price", "42.5", (3,))]
    assert t1.evidence_ids == (3,)
    # temperature.log: the turn's own find() gives it before cat() uses it; secret_42.csv: written in turn 1's call
    assert t2.matches == () and not t2.has_evidence


def test_a_real_task_s_turns_become_probes(evidence_tasks):
    task = evidence_tasks[0]
    ev = turn_evidence(task)
    assert [t.has_evidence for t in ev] == [False, True, True]
    assert ev[1].evidence_ids == (4,) and ev[1].matches[0].value == "file3.txt"
    probed = as_probe_task(task)
    assert [(p.after_message, p.evidence_ids, p.answer, p.kind) for p in probed.probes] == [
        (t.cut - 1, m.outputs, m.value, PROBE_KIND) for t in ev for m in t.matches]
    assert probed.messages == task.messages and not task.probes
    with pytest.raises(TaskError, match="not a BFCL task"):
        turn_evidence(replace(task, meta={}))


def test_each_control_drops_what_it_says_at_each_turn():
    tasks = [to_task(e) for e in read_entries("multi_turn_base")[:40]]
    seen_short = seen_other = 0
    for task in tasks:
        ev = turn_evidence(task)
        by_turn = {t.turn: t for t in ev}
        drop_ev, drop_other = turn_drops("drop_evidence", ev), turn_drops("drop_other", ev)
        assert [d.turn for d in drop_ev] == [d.turn for d in drop_other] == [t.turn for t in ev if t.has_evidence]
        for d, o in zip(drop_ev, drop_other):
            t = by_turn[d.turn]
            assert d.dropped == t.evidence_ids and d.short == 0 and d.trigger == t.start - 1
            others = [i for i in t.outputs_before if i not in t.evidence_ids]
            assert not set(o.dropped) & set(t.evidence_ids) and set(o.dropped) <= set(others)
            assert len(o.dropped) == min(len(t.evidence_ids), len(others))
            assert o.short == len(d.dropped) - len(o.dropped)
            assert list(o.dropped) == others[len(others) - len(o.dropped):]  # the latest ones
            seen_short += o.short > 0
            seen_other += bool(o.dropped)
        for name, drops in (("drop_evidence", drop_ev), ("drop_other", drop_other)):
            decisions = TurnControl(name).decisions(task)
            assert sorted(decisions) == [d.cut for d in drops if d.dropped]
            for d in drops:
                if d.dropped:
                    assert decisions[d.cut].schedule.drops_at(d.trigger) and {
                        x.message for _, xs in decisions[d.cut].schedule.drops for x in xs} == set(d.dropped)
    assert seen_short and seen_other  # both cases occur in these tasks
    with pytest.raises(TaskError, match="unknown control"):
        TurnControl("drop_all")


def test_the_judge_runs_the_controls_and_the_negative_controls_and_gold_passes_every_turn(engine, evidence_tasks):
    specs = [PolicySpec("drop_evidence"), PolicySpec("drop_other"),
             PolicySpec("rolling_drop", {"keep_tool_responses": 0}, label="keep0"),
             PolicySpec("rolling_drop", {"keep_tool_responses": 1}, label="keep1")]
    for task in evidence_tasks:
        results = judge(engine, [task], specs, responder=GoldResponder(task))
        assert [r.policy for r in results] == ["drop_evidence", "drop_other", "keep0", "keep1"]
        assert all(r.ok and r.passed for r in results), [r.turns for r in results]
        ev = turn_evidence(task)
        other = {d.turn: len(d.dropped) for d in turn_drops("drop_other", ev)}
        expected = {"drop_evidence": [len(t.evidence_ids) for t in ev],
                    "drop_other": [other.get(t.turn, 0) for t in ev],
                    "keep0": [len(t.outputs_before) for t in ev],
                    "keep1": [max(0, len(t.outputs_before) - 1) for t in ev]}
        for r in results:
            assert [t.dropped_messages for t in r.turns] == expected[r.policy], r.policy
    assert [len(t.evidence_ids) for t in turn_evidence(evidence_tasks[1])] == [0, 1]
    assert [d.short for d in turn_drops("drop_other", turn_evidence(evidence_tasks[1]))] == [1]  # nothing else to drop


def test_turns_evidence_answers_only_the_turns_with_evidence_and_gold_still_carries_the_state(engine, evidence_tasks):
    """``JudgeConfig(turns="evidence")``: the responder is asked only on the turns with evidence, and
    the turns skipped still run their gold calls (a later gold reply passes BFCL's state check only
    on the state they left)."""
    asked = []

    class Recording(GoldResponder):
        def reply(self, context, schedule, turn, step):
            asked.append(turn)
            return super().reply(context, schedule, turn, step)

    for task in evidence_tasks:
        asked.clear()
        (r,) = judge(engine, [task], [PolicySpec("full")], JudgeConfig(turns="evidence"), responder=Recording(task))
        wanted = [e.turn for e in turn_evidence(task) if e.has_evidence]
        assert wanted and [t.turn for t in r.turns] == wanted and r.ok and r.passed, r.turns
        assert sorted(set(asked)) == wanted
    with pytest.raises(ValueError, match="turns must be one of all, evidence, got 'some'"):
        JudgeConfig(turns="some")


def test_the_engine_answers_under_a_control(engine, evidence_tasks):
    task = evidence_tasks[0]
    results = judge(engine, [task], [PolicySpec("drop_evidence"), PolicySpec("drop_other")],
                    JudgeConfig(max_steps=1, max_tokens=2))
    assert all(r.ok for r in results) and [t.dropped_messages for t in results[0].turns] == [0, 1, 1]


def test_drop_other_is_refused_on_the_probe_path(eng, tasks):
    result = Replay(eng).evaluate(PolicySpec("drop_other"), tasks[0])
    assert not result.ok and "BFCL judge" in result.error


def test_the_report_scores_the_turns_with_evidence_apart():
    def run(policy, passes):
        return TaskJudgement("t", "multi_turn_base", "train", policy, True, None,
                             tuple(TurnResult(i, p, "", (), (), 1, 0) for i, p in enumerate(passes)))

    rows = summarize([run("full", [True, True, True]), run("drop_evidence", [True, False, True])],
                     ["full", "drop_evidence"], {"t": [1]})
    assert [r["evidence_turn_accuracy"]["rate"] for r in rows] == [1.0, 0.0]
    assert rows[1]["evidence_turn_accuracy"]["n"] == 1 and "evidence_turn_accuracy" not in summarize(
        [run("full", [True])], ["full"])[0]


def test_the_headroom_keeps_each_turn_s_evidence_until_its_turn(engine, evidence_tasks):
    task = evidence_tasks[0]
    ev = turn_evidence(task)
    wire = keep_evidence_schedule(task, ev)
    trigger = {i: int(t) for t, ids in wire["drop_message"].items() for i in ids}
    read = read_at(task)
    outputs = [i for i, m in enumerate(task.messages) if m["role"] == "tool"]
    assert set(trigger) <= set(outputs)
    for i in outputs:
        needed = [t.cut for t in ev if i in t.evidence_ids]
        assert trigger.get(i, len(task.messages)) == max([read[i], *needed])
    h = suite_headroom(evidence_tasks, DryEngine.of(engine))
    rows = {r.name: r for r in h.rows}
    assert list(rows) == ["full", "keep_evidence", "oracle_start", "rolling_drop K=12", "rolling_drop K=4"]
    assert h.evidence_turns == 3 and rows["keep_evidence"].evidence_attended == 3
    assert rows["oracle_start"].cost_cents <= rows["keep_evidence"].cost_cents <= rows["full"].cost_cents
    assert h.to_dict()["rows"][0]["saving_vs_full_pct"] == 0.0
