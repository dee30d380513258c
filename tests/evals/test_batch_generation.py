"""Generate-scored probes batched across a task's policies (``Replay.generate_answers`` through
``Engine.generate_many``) against the sequential evaluator (``Replay.evaluate``, one chat per probe).

tiny-random-gemma3 answers differ from probe to probe and policy to policy, so an answer given to
the wrong request would show. Each side has an engine of its own with an empty tree.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from engine import Engine
from engine.results import ChatResult
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult, evaluate, evaluate_with
from evals.cache.generation import BatchGeneration, GenerationTally
from tests.conftest import tolerances
from tests.evals.test_lockstep import RAISES

SPECS = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}), PolicySpec("drop_evidence"),
         PolicySpec("program", {}, source=RAISES, label="raises"),
         PolicySpec("rolling_drop", {"keep_tool_responses": 2, "reposition": "calls", "reposition_every": 1}),
         PolicySpec("standard", {"window": 256})]
CONFIG = EvalConfig(scoring="generate")


def _fresh(base: Engine) -> Engine:
    return Engine(base.model, base.tokenizer, base.renderer.template.name, name=base.name)


def _short(task, n: int = 2):
    return replace(task, probes=task.probes[:n])


def _rows(results: list[TaskResult]) -> list[TaskResult]:
    return [replace(r, seconds=0.0) for r in results]


@pytest.mark.skipif(not tolerances().exact_argmax, reason="greedy tokens compared across batch shapes in float32 "
                    "only (bf16 near-ties of a random model flip)")
def test_batched_answers_equal_the_sequential_evaluator(tiny_gemma, tasks):
    """Two tasks (two probes each), six policies (one failing): the rows, every generated answer
    and verdict included, equal one policy at a time; each batched answer checked alone: no token
    differs (float32 on CPU; the count is what the evaluator reports)."""
    lock, seq = _fresh(tiny_gemma), _fresh(tiny_gemma)
    batches: list[int] = []
    many = lock.generate_many
    lock.generate_many = lambda reqs, batch_size=8: batches.append(len(reqs)) or many(reqs, batch_size)  # type: ignore[method-assign]
    batched = Replay(lock, CONFIG, BatchGeneration(batch_size=3, check=True))
    sequential = Replay(seq, CONFIG)
    chosen = [_short(t) for t in tasks[:2]]
    got = evaluate_with(batched, SPECS, chosen)
    want = [sequential.evaluate(s, t) for t in chosen for s in SPECS]
    assert _rows(got) == _rows(want)
    answers = [p.generated for r in want for p in r.probes]
    assert len(set(answers)) > 2 and all(answers)  # the answers differ: each request got its own
    assert [(p.exact, p.contains, p.passed) for r in got for p in r.probes] == \
        [(p.exact, p.contains, p.passed) for r in want for p in r.probes]
    assert not got[3].ok and "no decision today" in (got[3].error or "")
    assert batches and max(batches) == len(SPECS) - 1  # every running policy's answer in one call
    tally = batched.generation_tally
    assert tally.batched == len(answers) == tally.checked and tally.alone == 0
    assert (tally.token_diffs, tally.text_diffs, tally.verdict_diffs, tally.diffs) == (0, 0, 0, [])
    assert sequential.generation_tally.alone == len(answers) and sequential.generation_tally.batched == 0
    assert all(r.seconds > 0 for r in got if r.ok)
    lock.check_integrity()


def test_evaluate_runs_the_policies_of_a_task_in_lockstep(eng, tasks):
    """``evaluate`` (akv eval's) batches the answers and gives the sequential rows; a batch of one
    generates alone."""
    chosen = [_short(tasks[0], 1)]
    config = EvalConfig(scoring="generate")
    want = [Replay(_fresh(eng), config).evaluate(s, chosen[0]) for s in SPECS[:3]]
    assert _rows(evaluate(_fresh(eng), SPECS[:3], chosen, config)) == _rows(want)
    one = Replay(_fresh(eng), config, BatchGeneration(batch_size=1))
    assert _rows(evaluate_with(one, SPECS[:3], chosen)) == _rows(want)
    assert one.generation_tally.alone == 3 and one.generation_tally.batched == 0
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        BatchGeneration(batch_size=0)


class Skewed(Engine):
    """An engine whose answers alone end one token early: a stand-in for a batched step whose
    rounding changed a token."""

    def chat(self, messages, schedule=None, **options):
        r = super().chat(messages, schedule, **options)
        return replace(r, token_ids=r.token_ids[:-1], text=r.text[:-1])


def test_answers_that_batching_changes_are_counted_and_logged(eng, tasks, caplog):
    skewed = Skewed(eng.model, eng.tokenizer, "plain", name=eng.name)
    replay = Replay(skewed, CONFIG, BatchGeneration(check=True))
    with caplog.at_level(logging.WARNING, logger="akv.evals.generation"):
        rows = replay.evaluate_policies(SPECS[:2], _short(tasks[0], 1))
    tally = replay.generation_tally
    assert tally.batched == tally.checked == tally.token_diffs == len(tally.diffs) == 2
    assert tally.text_diffs <= 2 and tally.diffs[0].where == f"{tasks[0].id}/full/probe 0"
    assert tally.diffs[0].batched[:-1] == tally.diffs[0].alone
    assert all(r.ok for r in rows)
    assert "batched generation differs from generating alone" in caplog.text
    assert "2 differ in tokens" in tally.summary() and tally.as_dict()["token_diffs"] == 2


def test_the_tally_compares_verdicts():
    tally = GenerationTally()
    same = ChatResult("Paris", [1, 2], None, "stop", None)  # type: ignore[arg-type]
    tally.compare("t/p/probe 0", "Paris", same, same)
    tally.compare("t/p/probe 1", "Paris", same, replace(same, text="Rome", token_ids=[3]))
    assert (tally.checked, tally.token_diffs, tally.text_diffs, tally.verdict_diffs) == (2, 1, 1, 1)
    assert tally.diffs[0].verdict_changed and tally.diffs[0].alone == (3,)
