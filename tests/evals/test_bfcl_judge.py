"""evals.bfcl.judge end to end on the tiny random model: the machinery runs under two policies,
the gold calls replayed as the model's answer pass every turn (a check of the judge), and jobs
judged in batches (their replies decoded together) give the one-at-a-time judgement."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from engine.schedule import parse_schedule
from evals.bfcl import GoldResponder, JudgeConfig, judge, judge_task, summarize
from evals.bfcl.data import read_entries, to_task
from evals.bfcl.judge import EngineResponder
from evals.bfcl.report import table
from evals.cache.evaluator import PolicySpec
from evals.errors import AKVError, TaskError
from tests.evals.conftest import short_bfcl_task

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
    lines = table(rows)  # the header, one row per policy, then drop_all against the full cache
    assert len(lines) == 4 and "drop_all" in lines[3] and "vs full on the same 2 turns" in lines[3]


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


def test_the_paired_difference_with_the_full_cache_against_a_slow_reference():
    """``vs_full``: the difference of passed shares on the turns both runs judged, and its bootstrap
    interval against a loop over the same draws (seeded), written out by hand."""
    import numpy as np

    from evals.bfcl.judge import TaskJudgement, TurnResult
    from evals.bfcl.report import paired_difference

    def run(policy, task, passes, ok=True):
        turns = tuple(TurnResult(i, p, "", (), (), 1, 0) for i, p in enumerate(passes))
        return TaskJudgement(task, "multi_turn_base", "train", policy, ok, None if ok else "boom", turns if ok else ())

    full = [run("full", "a", [True, True, False]), run("full", "b", [True, False]), run("full", "c", [False, True]),
            run("full", "d", [True])]
    mine = [run("p", "a", [True, False, True]), run("p", "b", [False, False]), run("p", "c", [False, True]),
            run("p", "d", [True], ok=False)]  # d failed: not paired
    d = paired_difference(mine, full, samples=500, seed=3)
    assert d is not None and (d["turns"], d["tasks"], d["lost"], d["gained"]) == (7, 3, 2, 1)
    assert d["diff"] == pytest.approx((3 - 4) / 7)
    pairs = {"a": ([1, 0, 1], [1, 1, 0]), "b": ([0, 0], [1, 0]), "c": ([0, 1], [0, 1])}
    draws = []
    for row in np.random.default_rng(3).integers(0, 3, size=(500, 3)):
        picked = [list(pairs)[i] for i in row]
        draws.append((sum(sum(pairs[t][0]) for t in picked) - sum(sum(pairs[t][1]) for t in picked))
                     / sum(len(pairs[t][0]) for t in picked))
    assert d["ci95"] == pytest.approx(list(np.percentile(draws, [2.5, 97.5])), abs=1e-12)
    same = paired_difference(full, full)
    assert same is not None and same["diff"] == 0 and same["ci95"] == [0.0, 0.0]
    assert paired_difference(mine, []) is None
    rows = summarize([*full, *mine], ["full", "p"])
    assert rows[0]["vs_full"] is None and rows[1]["vs_full"]["diff"] == pytest.approx(d["diff"])


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


# ---------------------------------------------------------------- batched judgement (judge's batch_size)

POLICIES = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}, label="rolling_1"), DROP_ALL]


def _rows(results):
    """The judgements without their wall time (which batching changes)."""
    return [{k: v for k, v in r.to_row().items() if k != "seconds"} for r in results]


class _Replies:
    """Records every reply the engine writes with its request (messages and schedule): ``alone``
    (``chat``) and ``batched`` (``generate_many``, one round of ``rounds`` each)."""

    def __init__(self, engine, monkeypatch) -> None:
        self.alone: list[tuple[str, str]] = []
        self.batched: list[tuple[str, str]] = []
        self.rounds: list[int] = []
        chat, many = engine.chat, engine.generate_many

        def key(messages, schedule) -> str:
            return json.dumps([list(messages), parse_schedule(schedule).to_wire()])

        def record_chat(messages, schedule=None, **options):
            out = chat(messages, schedule, **options)
            self.alone.append((key(messages, schedule), out.text))
            return out

        def record_many(requests, batch_size=8):
            out = many(requests, batch_size)
            self.rounds.append(len(requests))
            self.batched += [(key(r.messages, r.schedule), o.text) for r, o in zip(requests, out)]
            return out

        monkeypatch.setattr(engine, "chat", record_chat)
        monkeypatch.setattr(engine, "generate_many", record_many)


def test_batched_judgement_equals_the_one_at_a_time_judgement(engine, small_task, monkeypatch):
    """2 tasks of 2 and 3 turns x 3 policies, 4 jobs in flight: jobs end at different rounds and the
    next ones start then. ``required``: each turn's first reply decoded under its task's tools'
    grammar (per sequence in a batch). float32: the greedy tokens of a batched step equal the
    sequential ones exactly (tests/engine/test_batch_generate.py), so every reply and verdict does.
    Alone, most of its time is llguidance's view of the tokenizer (built once per process, and then
    test_bfcl_live's server test does not build it again)."""
    tasks = [small_task, short_bfcl_task("multi_turn_base_1", 3)]
    config = JudgeConfig(max_steps=2, max_tokens=8, tool_choice="required")
    replies = _Replies(engine, monkeypatch)
    with engine.scratch_cache():
        alone = judge(engine, tasks, POLICIES, config, batch_size=1)
    with engine.scratch_cache():
        batched = judge(engine, tasks, POLICIES, config, batch_size=4)
    assert [(r.task_id, r.policy) for r in batched] == [(t.id, p.display) for t in tasks for p in POLICIES]
    assert _rows(batched) == _rows(alone) and all(r.ok for r in batched)
    assert {r.turns[-1].dropped_messages for r in batched} > {0}  # the drops change the contexts
    assert sorted(replies.batched) == sorted(replies.alone) and len({t for _, t in replies.alone}) > 1
    assert len(replies.alone) == 15 and replies.rounds == [4, 4, 3, 2, 2]  # new jobs start as others end


def test_a_batched_rerun_takes_logged_results_without_judging_them(engine, small_task, tmp_path, monkeypatch):
    from evals.bfcl.store import ResultLog

    path, config, seen = tmp_path / "out.json.partial.jsonl", JudgeConfig(max_steps=1, max_tokens=2), []
    first = judge(engine, [small_task], POLICIES[:1], config, log=ResultLog(path, {"model": "m"}), batch_size=1)
    replies = _Replies(engine, monkeypatch)
    again = judge(engine, [small_task], POLICIES, config, on_result=seen.append, log=ResultLog(path, {"model": "m"}))
    assert again[0].to_row() == first[0].to_row() == seen[0].to_row() and len(seen) == 3  # seconds too: not judged
    assert not replies.alone and sum(replies.rounds) == 4  # two policies' two turns, nothing for the logged one
    assert len(ResultLog(path, {"model": "m"})) == 3


def test_a_request_that_fails_to_prepare_fails_only_its_job(small_task):
    """A window of 1050 positions: ``small_task``'s second turn (1108 positions) is refused when its
    request is prepared; the other task's job in the same rounds (at most 961) is judged."""
    from engine import Engine
    from tests.conftest import get_engine

    base = get_engine("tiny-random")
    narrow = Engine(base.model, base.tokenizer, "chatml", name=base.name, max_context=1050)
    tasks, config = [small_task, short_bfcl_task("multi_turn_base_1", 2)], JudgeConfig(max_steps=1, max_tokens=2)
    batched = judge(narrow, tasks, POLICIES[:1], config)
    assert [r.ok for r in batched] == [False, True] and len(batched[1].turns) == 2
    assert batched[0].error.startswith("ContextLengthError: the prompt reaches position 1108")
    assert _rows(batched) == _rows(judge(narrow, tasks, POLICIES[:1], config, batch_size=1))


def test_a_batch_the_engine_refuses_is_answered_one_at_a_time(engine, small_task, monkeypatch):
    def refuse(requests, batch_size=8):
        raise AKVError("the batch failed")

    config = JudgeConfig(max_steps=1, max_tokens=2)
    want = judge(engine, [small_task], POLICIES[:2], config, batch_size=1)
    monkeypatch.setattr(engine, "generate_many", refuse)
    assert _rows(judge(engine, [small_task], POLICIES[:2], config)) == _rows(want)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        judge(engine, [small_task], POLICIES[:1], config, batch_size=0)


def test_akv_eval_on_a_bfcl_suite_loads_its_weights_and_batches_by_default(engine, small_task, tmp_path, monkeypatch,
                                                                           capsys):
    """The command's wiring (the model and the judge stubbed: the gold calls answer): ``--weights``
    reaches the engine, the partial log's header and the results; ``--batch`` (default 8) reaches
    the judge and the results, not the header; ``--batch 0`` is one line."""
    from engine.engine import Engine
    from rsi.cli import main

    loads, calls = [], []

    def gold_judge(eng, tasks, specs, config, **kw):
        calls.append((kw["batch_size"], kw["log"].header))
        return judge(eng, tasks, specs, config, responder=GoldResponder(tasks[0]), **kw)

    monkeypatch.setattr("evals.bfcl.cli.load_tasks", lambda *a: SimpleNamespace(tasks=[small_task], split="train"))
    monkeypatch.setattr(Engine, "from_pretrained", classmethod(lambda cls, name, **kw: loads.append(kw) or engine))
    monkeypatch.setattr("evals.bfcl.cli.judge", gold_judge)
    out = tmp_path / "r.json"
    argv = ["eval", "--suite", "bfcl-base", "--limit", "1", "--model", "tiny-random", "--policy", "full",
            "--weights", "gguf", "--out", str(out)]
    assert main(argv) == 0 and main([*argv, "--batch", "1", "--force"]) == 0
    assert [kw["weights"] for kw in loads] == ["gguf", "gguf"]
    assert [b for b, _ in calls] == [8, 1] and calls[0][1] == calls[1][1] and calls[0][1]["weights"] == "gguf"
    result = json.loads(out.read_text())
    assert (result["weights"], result["batch"], result["policies"][0]["task_accuracy"]["rate"]) == ("gguf", 1, 1.0)
    capsys.readouterr()
    assert main([*argv, "--batch", "0", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--batch must be an integer >= 1, got 0" in err and len(err.splitlines()) == 1, err
