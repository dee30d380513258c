"""Several policies on one task in lockstep: each probe's scorings for all of them in one forward.

:meth:`evals.cache.evaluator.Replay.evaluate_policies` gives the rows of
``[replay.evaluate(spec, task) for spec in specs]`` (``seconds`` aside: each policy is charged its
own deciding and accounting and an equal share of each batch). Each policy decides and is
accounted on its own (no forward runs); then, probe by probe, every policy still running asks its
probe and the engine scores them all together (:meth:`engine.Engine.score_many`: the history the
policies share computed once, the branches where their drops differ in the same pass). With
``generate`` their greedy answers are then generated together (:meth:`Replay.generate_answers`:
prefilled in order, decoded in shared steps by ``engine.Engine.generate_many``); answers that the
batched step's rounding changes are counted in ``Replay.generation_tally`` when it is checked.

A policy that fails (its program, its decision, a probe it cannot ask) becomes the failed row
sequential evaluation gives it, with the same reason (its first failure, met in the same order),
and the others go on. Engines that cannot batch (a remote engine), a single policy, and
evaluators that answer probes their own way evaluate one policy after another.

Not for: policies on different tasks (they share no history).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from engine.errors import AKVError
from engine.interface import BatchScorer
from engine.results import ChatResult, Prepared, ScoreResult
from evals.tasks.schema import Task
from search_spaces import request_points
from search_spaces.cache.decision import Decision

if TYPE_CHECKING:
    from evals.cache.cost import CostBreakdown
    from evals.cache.evaluator import PolicySpec, ProbeAsk, ProbeResult, Replay, RequestCost, TaskResult


@dataclass
class _Run:
    """One policy's evaluation in progress; ``failed`` is its row once it has failed."""

    spec: PolicySpec
    decisions: Mapping[int, Decision | None]
    requests: list[RequestCost]
    cost: CostBreakdown
    seconds: float
    probes: list[ProbeResult] = field(default_factory=list)
    failed: TaskResult | None = None


def evaluate_policies(replay: Replay, specs: Sequence[PolicySpec], task: Task) -> list[TaskResult]:
    """Every policy of ``specs`` on ``task``, one row each in order (see the module docstring).

    Raises:
        AKVError: only a transient one (a server down), as :meth:`Replay.evaluate` does.
    """
    scorer = replay.batch_scorer()
    if scorer is None or len(specs) < 2 or not task.probes:  # (a log task: its fidelity turns, one policy at a time)
        return [replay.evaluate(spec, task) for spec in specs]
    started = [_start(replay, spec, task) for spec in specs]
    runs = [r for r in started if isinstance(r, _Run)]
    for index in range(len(task.probes)):
        live = [r for r in runs if r.failed is None]
        if not live:
            break
        _probe_together(replay, scorer, task, index, live)
    return [r if not isinstance(r, _Run) else (r.failed or replay.scored_row(
        r.spec, task, tuple(r.probes), tuple(r.requests), r.cost, r.seconds)) for r in started]


def _start(replay: Replay, spec: PolicySpec, task: Task) -> _Run | TaskResult:
    """The policy's decisions and its session's accounting, or its failed row."""
    t0 = time.perf_counter()
    try:
        decisions = replay.decide(spec, task)
        requests, cost = replay.account(task, list(request_points(list(task.messages))), decisions)
    except AKVError as err:
        if err.transient:
            raise
        return replay.failed_row(spec, task, f"{type(err).__name__}: {err}", t0)
    return _Run(spec, decisions, requests, cost, time.perf_counter() - t0)


def _fail(replay: Replay, run: _Run, task: Task, err: AKVError) -> None:
    if err.transient:
        raise err
    run.failed = replace(replay.failed_row(run.spec, task, f"{type(err).__name__}: {err}", time.perf_counter()),
                         seconds=run.seconds)


def _probe_together(replay: Replay, scorer: BatchScorer, task: Task, index: int, live: list[_Run]) -> None:
    """Probe ``index`` for every run of ``live``: asked one by one, scored in one batch, the greedy
    answers (with ``generate``) in shared decode steps, answered."""
    probe = task.probes[index]
    asks: list[tuple[_Run, ProbeAsk, Prepared | None]] = []
    for run in live:
        t0 = time.perf_counter()
        try:
            ask = replay.ask_probe(task, index, run.decisions[probe.after_message + 1], run.spec)
            conts = list(ask.prompt.continuations)
            if conts:
                asks.append((run, ask, scorer.prepare(ask.context, ask.schedule, prefix=ask.prompt.prefix,
                                                      candidates=conts)))
            else:  # refused (by log-likelihood) or answered by generation alone, as sequentially
                replay.score_probe(ask.context, conts, ask.schedule, ask.prompt.prefix)
                asks.append((run, ask, None))
        except AKVError as err:
            _fail(replay, run, task, err)
        run.seconds += time.perf_counter() - t0
    batch = [p for _, _, p in asks if p is not None]
    t0 = time.perf_counter()
    scores = iter(_score_all(scorer, batch))
    share = (time.perf_counter() - t0) / max(1, len(batch))
    ready: list[tuple[_Run, ProbeAsk, ScoreResult | None]] = []
    for run, ask, prepared in asks:
        scored = next(scores) if prepared is not None else None
        run.seconds += share if prepared is not None else 0.0
        if isinstance(scored, AKVError):
            _fail(replay, run, task, scored)
        else:
            ready.append((run, ask, scored))
    answers: list[ChatResult | AKVError | None] = [None] * len(ready)
    if replay.config.generate and ready:
        t0 = time.perf_counter()
        answers = list(replay.generate_answers(task, [(run.spec.display, ask) for run, ask, _ in ready]))
        share = (time.perf_counter() - t0) / len(ready)
        for run, _, _ in ready:
            run.seconds += share
    for (run, ask, scored), answer in zip(ready, answers):
        t0 = time.perf_counter()
        try:
            if isinstance(answer, AKVError):
                raise answer
            run.probes.append(replay.answer_probe(task, ask, scored, answer))
        except AKVError as err:
            _fail(replay, run, task, err)
        run.seconds += time.perf_counter() - t0


def _score_all(scorer: BatchScorer, batch: list[Prepared]) -> list[ScoreResult | AKVError]:
    """The batch's scores; should the batch be refused, each request scored alone (its error, if
    any, in its place) so that one bad request does not sink the others."""
    if not batch:
        return []
    try:
        return list(scorer.score_many(batch))
    except AKVError as err:
        if err.transient:
            raise
    out: list[ScoreResult | AKVError] = []
    for p in batch:
        try:
            out.extend(scorer.score_many([p]))
        except AKVError as err:
            if err.transient:
                raise
            out.append(err)
    return out
