"""Lockstep evaluation (``Replay.evaluate_policies``) against ``Replay.evaluate`` one policy at a time.

Each side runs on an engine of its own with an empty tree. The rows must be equal (``seconds``
aside), and so must every candidate score the engine gave (within 1e-5), request by request.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine import Engine
from engine.results import Prepared, ScoreResult
from evals.cache.evaluator import EvalConfig, PolicySpec, ProbeAsk, Replay, TaskResult
from search_spaces.cache.seeds import seed_source

RAISES = ("def decide(request, params):\n    raise ValueError('no decision today')\n\n"
          "def space(trial):\n    return {}\n")
INVALID = ("def decide(request, params):\n    return {'drop_message': {'0': [5]}}\n\n"
           "def space(trial):\n    return {}\n")


def _program(name: str, **params) -> PolicySpec:
    return PolicySpec("program", params, source=seed_source(name), label=name)


SPECS = [
    PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
    PolicySpec("program", {}, source=RAISES, label="raises"),
    PolicySpec("rolling_drop", {"keep_tool_responses": 2, "reposition": "calls", "reposition_every": 1}),
    PolicySpec("drop_evidence"), PolicySpec("standard", {"window": 256}),
    PolicySpec("program", {}, source=INVALID, label="invalid"),
    _program("scored_drop", budget_tokens=300), PolicySpec("full"),
]


class Recording(Engine):
    """An engine that remembers every candidate score it gives, keyed by the request."""

    def __init__(self, base: Engine):
        super().__init__(base.model, base.tokenizer, base.renderer.template.name, name=base.name)
        self.scores: dict[tuple[str, tuple[str, ...]], list[float]] = {}

    def _record(self, p: Prepared, r: ScoreResult) -> None:
        key = (repr(p.items), p.candidates)
        if key in self.scores:
            assert np.allclose(self.scores[key], r.logprobs, atol=1e-5, rtol=0)
        self.scores[key] = r.logprobs

    def score(self, messages, candidates, schedule=None, *, prefix="", salt=None, prepared=None):
        p = prepared or self.prepare(messages, schedule, prefix=prefix, candidates=candidates, salt=salt)
        r = super().score(messages, candidates, schedule, prefix=prefix, salt=salt, prepared=p)
        self._record(p, r)
        return r

    def score_many(self, requests):
        out = super().score_many(requests)
        for p, r in zip(requests, out):
            self._record(p, r)
        return out


def _rows(results: list[TaskResult]) -> list[TaskResult]:
    return [replace(r, seconds=0.0) for r in results]


def _compare(base: Engine, specs: list[PolicySpec], tasks, config: EvalConfig) -> list[TaskResult]:
    lock, seq = Recording(base), Recording(base)
    batches: list[int] = []
    many = lock.score_many
    lock.score_many = lambda reqs: batches.append(len(reqs)) or many(reqs)  # type: ignore[method-assign]
    a, b = Replay(lock, config), Replay(seq, config)
    answered: list[tuple[ProbeAsk, ScoreResult | None]] = []
    answer = a.answer_probe
    a.answer_probe = lambda task, ask, scored, *gen: answered.append((ask, scored)) or answer(task, ask, scored, *gen)  # type: ignore[method-assign]
    out = []
    for task in tasks:
        got = a.evaluate_policies(specs, task)
        want = [b.evaluate(s, task) for s in specs]
        assert _rows(got) == _rows(want), task.id
        assert all(r.seconds > 0 for r in got)
        out.extend(got)
    assert lock.scores.keys() == seq.scores.keys() and lock.scores
    for key, lp in seq.scores.items():
        assert np.allclose(lock.scores[key], lp, atol=1e-5, rtol=0), key[1]
    assert max(batches) > 1  # the policies' probes were scored together
    for ask, scored in answered:  # each policy's probe got the scores of its own request
        assert scored is not None
        p = lock.prepare(ask.context, ask.schedule, prefix=ask.prompt.prefix, candidates=ask.prompt.continuations)
        assert np.allclose(scored.logprobs, seq.scores[(repr(p.items), p.candidates)], atol=1e-5, rtol=0)
    lock.check_integrity()
    return out


def test_lockstep_rows_equal_one_policy_at_a_time(tasks, eng):
    results = _compare(eng, SPECS, tasks[:2], EvalConfig(generate=False))
    by = {r.policy: r for r in results[:len(SPECS)]}
    assert not by["raises"].ok and "no decision today" in (by["raises"].error or "")
    assert not by["invalid"].ok and by["invalid"].probes == ()
    assert by["full"].ok and len(by["full"].probes) == len(tasks[0].probes)


def test_lockstep_rows_equal_one_policy_at_a_time_under_the_frame_guard(tasks, eng):
    specs = [*SPECS[:4], PolicySpec("rolling_drop", {"keep_tool_responses": 0})]
    guarded = _compare(eng, specs, tasks[:1], EvalConfig(generate=False, frame_guard=True))
    plain = _compare(eng, specs, tasks[:1], EvalConfig(generate=False))
    assert guarded[-1].cost_cents > plain[-1].cost_cents  # K=0 drops each tool output before it is read


def test_lockstep_with_generation(tasks, eng):
    _compare(eng, [PolicySpec("full"), PolicySpec("program", {}, source=RAISES, label="raises"),
                   PolicySpec("rolling_drop", {"keep_tool_responses": 1})], tasks[:1], EvalConfig())


def test_one_policy_or_an_engine_that_cannot_batch_goes_one_at_a_time(tasks, eng, monkeypatch):
    replay = Replay(eng, EvalConfig(generate=False))
    monkeypatch.setattr(Replay, "batch_scorer", lambda self: None)
    calls = []
    real = Replay.evaluate
    monkeypatch.setattr(Replay, "evaluate", lambda self, s, t: calls.append(s) or real(self, s, t))
    out = replay.evaluate_policies(SPECS[:2], tasks[0])
    assert calls == SPECS[:2] and [r.policy for r in out] == ["full", "rolling_drop"]
    assert replay.evaluate_policies([], tasks[0]) == []


@pytest.mark.slow
def test_lockstep_on_the_real_model(gemma, tasks):
    """gemma-3-270m, one task (its first probe), three policies: rows and scores as one policy at a time."""
    specs = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
             PolicySpec("drop_evidence")]
    small = min(tasks, key=lambda t: sum(len(str(m.get("content", ""))) for m in t.messages))
    results = _compare(gemma, specs, [replace(small, probes=small.probes[:1])], EvalConfig(generate=False))
    assert all(r.ok for r in results)
