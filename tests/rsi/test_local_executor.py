"""The in-process executor: policies of a task in lockstep, results as one at a time, each stored."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import rsi.cache.executors.local as local
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.tasks import load_suite
from rsi.cache.executors.base import EvalRequest
from rsi.cache.executors.local import LocalExecutor
from rsi.store import EvalStore, eval_key

EVAL = EvalConfig(generate=False)
RAISES = "def decide(request, params):\n    raise ValueError('no')\n\ndef space(trial):\n    return {}\n"


def test_lockstep_groups_by_task_and_stores_every_result(tiny_plain, tmp_path, monkeypatch):
    tasks = load_suite("smoke", "train")[:2]
    specs = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
             PolicySpec("program", {}, source=RAISES, label="raises"), PolicySpec("thinking_drop")]
    # Interleaved by task: the executor sorts them into task runs.
    reqs = [EvalRequest(s, t, eval_key(s.key, t.id, "tiny", EVAL.digest)) for s in specs for t in tasks]
    monkeypatch.setattr(local, "LOCKSTEP_POLICIES", 3)  # a task's 4 policies in a group of 3 and one alone
    groups: list[tuple[str, int]] = []
    together = Replay.evaluate_policies
    monkeypatch.setattr(Replay, "evaluate_policies",
                        lambda self, ss, t: groups.append((t.id, len(ss))) or together(self, ss, t))
    store = EvalStore(tmp_path / "e.jsonl")
    got = LocalExecutor(tiny_plain, EVAL, store, progress=False).run(reqs)
    assert groups == [(tasks[0].id, 3), (tasks[1].id, 3)]
    assert all(store.get(r.key) is not None for r in reqs)
    one = Replay(type(tiny_plain)(tiny_plain.model, tiny_plain.tokenizer, "plain", name=tiny_plain.name), EVAL)
    want = [one.evaluate(r.spec, r.task) for r in reqs]
    def row(r):  # as JSON: a failed row's pass rate is NaN
        return json.dumps(replace(r, seconds=0.0).to_row(), sort_keys=True, default=str)

    assert [row(r) for r in got] == [row(r) for r in want]
    assert sum(not r.ok for r in got) == len(tasks)


@pytest.mark.parametrize("size", [1, 2])
def test_groups_are_runs_of_one_task(size):
    a, b = load_suite("smoke", "train")[:2]
    reqs = [EvalRequest(PolicySpec("full"), t, str(i)) for i, t in enumerate([a, a, a, b, a])]
    assert [[r.key for r in g] for g in local._groups(reqs, size)] == (
        [["0"], ["1"], ["2"], ["3"], ["4"]] if size == 1 else [["0", "1"], ["2"], ["3"], ["4"]])
