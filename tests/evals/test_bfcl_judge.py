"""evals.bfcl.judge end to end on the tiny random model: the machinery runs under two policies,
and the gold calls replayed as the model's answer pass every turn (a check of the judge)."""

from __future__ import annotations

import math

import pytest

from evals.bfcl import GoldResponder, JudgeConfig, judge, judge_task, summarize
from evals.bfcl.data import read_entries, to_task
from evals.bfcl.judge import EngineResponder
from evals.bfcl.report import table
from evals.cache.evaluator import PolicySpec
from evals.errors import AKVError, TaskError

DROP_ALL = PolicySpec("rolling_drop", {"keep_tool_responses": 0, "target": "both"}, label="drop_all")


@pytest.fixture(scope="module")
def engine():
    """The tiny random model under ChatML (tool specs rendered in the system turn, as for Qwen)."""
    from engine import Engine
    from tests.conftest import get_engine

    base = get_engine("tiny-random")
    return Engine(base.model, base.tokenizer, "chatml", name=base.name)


def test_gold_replayed_as_the_answer_passes_every_turn(engine, small_task):
    for task in (small_task, *(to_task(e) for e in read_entries("multi_turn_long_context")[:3])):
        result = judge_task(engine, GoldResponder(task), task, None, "gold")
        assert result.ok and result.passed and len(result.turns) == len(task.meta["bfcl"]["turn_starts"]), result
        assert all(t.steps == 2 and t.calls for t in result.turns if task.meta["bfcl"]["gold"][t.turn])


def test_a_wrong_call_fails_the_turn_by_the_state_check(engine, small_task):
    class Wrong(GoldResponder):
        def reply(self, context, schedule, turn, step):
            return "[mkdir(dir_name='elsewhere')]" if step == 0 else "Done."

    result = judge_task(engine, Wrong(small_task), small_task, None, "wrong")
    assert result.ok and not result.passed
    assert result.turns[0].calls == ("mkdir(dir_name='elsewhere')",)
    assert result.turns[0].reason.startswith("multi_turn:instance_state_mismatch")


def test_the_model_under_two_policies_gives_accuracy_with_intervals(engine, small_task):
    specs = [PolicySpec("full"), DROP_ALL]
    results = judge(engine, [small_task], specs, JudgeConfig(max_steps=1, max_tokens=2))
    assert [r.policy for r in results] == ["full", "drop_all"] and all(r.ok for r in results)
    assert results[1].turns[1].dropped_messages > 0 and results[0].turns[1].dropped_messages == 0
    rows = summarize(results, ["full", "drop_all"])
    for row in rows:
        for key in ("turn_accuracy", "task_accuracy"):
            score = row[key]
            lo, hi = score["ci95"]
            assert 0 <= lo <= score["rate"] <= hi <= 1 and not math.isnan(score["rate"])
        assert row["turn_accuracy"]["n"] == 2 and row["task_accuracy"]["n"] == 1
        assert set(row["per_category"]) == {"multi_turn_base"}
    assert all(r.split_rule and r.to_row()["split"] == small_task.split for r in results)
    assert len(table(rows)) == 3


def test_retention_pairs_turns_with_the_full_cache():
    from evals.bfcl.judge import TaskJudgement, TurnResult

    def run(policy, passes):
        turns = tuple(TurnResult(i, p, "", (), (), 1, 0) for i, p in enumerate(passes))
        return TaskJudgement("t", "multi_turn_base", "heldout", policy, True, None, turns)

    rows = summarize([run("full", [True, True, False]), run("p", [True, False, True])], ["full", "p"])
    assert rows[1]["retention"]["rate"] == 0.5 and rows[1]["retention"]["n"] == 2
    assert rows[1]["turn_accuracy"]["rate"] == pytest.approx(2 / 3) and rows[1]["task_accuracy"]["rate"] == 0
    assert summarize([run("p", [True])], ["p"])[0]["retention"] is None  # no full-cache run: no retention
    assert rows[0]["retention"] is None  # the full cache against itself: no retention


def test_non_bfcl_tasks_are_refused(engine, tasks):
    with pytest.raises(TaskError, match="not a BFCL task"):
        judge(engine, tasks[:1], [PolicySpec("full")])


def test_akv_eval_on_a_bfcl_suite_without_the_package_is_one_line(monkeypatch, tmp_path, capsys):
    from importlib import metadata

    from rsi.cli import main

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    code = main(["eval", "--suite", "bfcl-long", "--split", "heldout", "--limit", "4", "--model", "tiny-random",
                 "--policy", "full", "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "make bfcl" in err and len(err.splitlines()) == 1, err


def test_turn_intervals_widen_when_a_task_s_turns_move_together():
    from evals.bfcl.report import clustered_rate
    from evals.cache.scoring import wilson_interval

    together = clustered_rate([[True, True], [False, False]])  # draws: 0, 1/2 or 1 of the turns
    wilson = wilson_interval(2, 4)
    assert together["rate"] == 0.5 and together["n"] == 4
    assert together["ci95"] == [0.0, 1.0] and together["ci95"][0] < wilson.low
    mixed = clustered_rate([[True, False]] * 6)  # every task alike: the bootstrap has no spread
    iv = wilson_interval(6, 12)
    assert mixed["ci95"] == [iv.low, iv.high]
    one = wilson_interval(2, 3)
    assert clustered_rate([[True, False, True]])["ci95"] == [one.low, one.high]
    assert clustered_rate([])["ci95"] is None


def test_each_result_is_recorded_as_it_finishes_and_a_rerun_takes_it_from_the_log(engine, small_task, tmp_path):
    from evals.bfcl.store import ResultLog

    class Never(GoldResponder):
        def reply(self, context, schedule, turn, step):
            raise AssertionError("a finished result is judged again")

    path = tmp_path / "out.json.partial.jsonl"
    first = judge(engine, [small_task], [PolicySpec("full")], responder=GoldResponder(small_task),
                  log=ResultLog(path, {"model": "m"}))
    with path.open("a") as f:
        f.write('{"policy": "full", "task_')  # a line torn by a crash is ignored
    again = judge(engine, [small_task], [PolicySpec("full")], responder=Never(small_task),
                  log=ResultLog(path, {"model": "m"}))
    assert first[0].passed and [r.to_row() for r in again] == [r.to_row() for r in first]
    with pytest.raises(AKVError, match=r"another run \(model: 'm' there, 'n' now\)"):
        ResultLog(path, {"model": "n"})


class _Recorder:
    """A chat engine that records the ``tool_choice`` of each call and answers with no call."""

    def __init__(self) -> None:
        self.choices: list[str] = []

    def chat(self, messages, schedule=None, **options):
        self.choices.append(options["tool_choice"])
        return type("Result", (), {"text": "no call"})()


@pytest.mark.parametrize(("mode", "expected"), [("auto", ["auto", "auto"]), ("required", ["required", "auto"])])
def test_the_responder_requires_a_call_only_on_a_turn_s_first_reply(mode, expected):
    engine = _Recorder()
    responder = EngineResponder(engine, max_tokens=8, tool_choice=mode)  # type: ignore[arg-type]
    for step in range(2):
        responder.reply([{"role": "user", "content": "x"}], None, turn=0, step=step)
    assert engine.choices == expected


def test_an_unknown_tool_choice_is_refused_with_its_value():
    with pytest.raises(ValueError, match="'none'"):
        JudgeConfig(tool_choice="none")
