"""The cache track's tuning: the shared study (``rsi.tuning``) over train tasks, with the
evaluation cascade's zero-forward screen in front of it.

A trial's two stages are the first ``fidelity_tasks`` train tasks, then the rest (:class:`TaskScoring`:
cost down, pass rate up). With a :class:`Screen`, before any model evaluation a proxy study draws many
parameter sets and scores each at the zero-forward fidelity (``evals.cache.fidelity``: exact cost,
pass predicted from which evidence stays attended); only the sets no other one beats by a margin
(:func:`promoted`) are enqueued in the model study. Proxy numbers stay in ``TrialOutcome.proxy``.
A program's ``space`` that fails (bounds Optuna cannot hold, endless suggesting, exceptions) makes
a FAIL trial: ``suggest_params`` never raises for what a program does, so no program ends a search.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import optuna

from evals.cache.evaluator import TaskResult
from evals.tasks.schema import Task
from rsi._journal import Journal
from rsi.cache.metrics import Metrics, aggregate
from rsi.tuning import (
    CandidateFailure,
    Direction,
    TrialOutcome,
    TuneResult,
    draw_or_fail,
    drawn,
    fail,
    make_sampler,
    run_study,
    study_seed,
)
from search_spaces import suggest_params

Evaluate = Callable[[dict[str, Any], Sequence[Task]], list[TaskResult]]
"""(params, tasks) -> results of the program under tuning."""
Reference = Callable[[Sequence[Task]], list[Metrics]]
"""tasks -> the current front's metrics on exactly those tasks."""


@dataclass(frozen=True)
class TaskScoring:
    """A parameter set's cost and pass rate over the train ``tasks`` (:class:`rsi.tuning.Scoring`):
    the first ``first`` tasks, then the rest; ``reference`` gives the front on the first ones."""

    tasks: Sequence[Task]
    first: int
    run: Evaluate
    front: Reference
    unit: ClassVar[str] = "tasks"
    directions: ClassVar[tuple[Direction, Direction]] = ("minimize", "maximize")

    @property
    def units(self) -> int:
        return len(self.tasks)

    def evaluate(self, params: dict[str, Any], start: int, stop: int) -> list[TaskResult]:
        return self.run(params, self.tasks[start:stop])

    def score(self, results: Sequence[TaskResult]) -> Metrics:
        return aggregate(results)

    def refusal(self, results: Sequence[TaskResult], score: Metrics, whole: bool) -> str | None:
        bad = next((r for r in results if not r.ok), None)
        if bad is not None:
            return bad.error or "evaluation failed"
        return "no probes scored" if whole and not score.ok else None

    def point(self, score: Metrics) -> tuple[float, float]:
        return score.cost_cents_mean, score.pass_rate

    values = point

    def reference(self, k: int) -> list[Metrics]:
        return self.front(self.tasks[:k])


@dataclass(frozen=True)
class Screen:
    """The zero-forward stage of the evaluation cascade (``evals.cache.fidelity``).

    Attributes:
        evaluate: (params, tasks) -> proxy results (exact cost, predicted pass) on the train tasks.
        trials: proxy trials per program (each costs no forward).
        promote: at most this many distinct parameter sets go on to the model.
        margin: a screened set is promoted unless another costs no more and predicts at least
            ``margin`` more pass (0: the plain Pareto front of the predictions).
        anchors: the experts' predicted pass rates on the same tasks; promotion then favours the
            cheapest set predicted to reach each (:func:`promoted`).
        timed: called with the wall seconds of the whole proxy study (each trial's ``space`` in
            the sandbox, Optuna's sampling and storage, ``evaluate``) when it ends: what screening
            really costs.
        storage: where the proxy study is written when it ends (``None``: with the model study).
            A search gives it a journal file: a database write per trial would cost a third of
            what the trial does.
    """

    evaluate: Evaluate
    trials: int
    promote: int
    margin: float
    anchors: tuple[float, ...] = ()
    timed: Callable[[float], None] | None = None
    storage: Any = None

    def __post_init__(self) -> None:
        if self.trials < 1 or self.promote < 1 or not 0 <= self.margin < 1:
            raise ValueError(f"a screen needs trials >= 1, promote >= 1 and 0 <= margin < 1, got trials={self.trials}, "
                             f"promote={self.promote}, margin={self.margin}")


def _params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def promoted(screened: Sequence[TrialOutcome], k: int, margin: float,
             anchors: Sequence[float] = ()) -> list[TrialOutcome]:
    """The screened trials that go on to the model: distinct parameter sets that no other one
    margin-dominates (costs no more and predicts at least ``margin`` more pass; with ``margin`` 0,
    plain Pareto dominance), at most ``k`` of them.

    Without ``anchors``, spread evenly along cost (``k`` = 1: the highest predicted pass, then the
    lowest cost). With ``anchors`` (the experts' predicted pass rates on the same tasks): the highest
    predicted pass first, then for each anchor, highest first, the cheapest set predicted to reach
    it -- the candidates that could be cheaper than an expert at its accuracy -- then the rest spread
    along cost."""
    unique: dict[str, tuple[TrialOutcome, float, float]] = {}
    for o in screened:
        if o.proxy is not None and o.proxy.ok:
            unique.setdefault(_params_key(o.params), (o, o.proxy.cost_cents_mean, o.proxy.pass_rate))
    points = list(unique.values())

    def beaten(c: float, p: float) -> bool:
        return any(qc <= c and qp >= p + margin and (margin > 0 or qc < c or qp > p) for _, qc, qp in points)

    keep = sorted((x for x in points if not beaten(x[1], x[2])), key=lambda x: (x[1], -x[2], x[0].number))
    if len(keep) <= k:
        return [x[0] for x in keep]
    best = max(keep, key=lambda x: (x[2], -x[1], -x[0].number))
    if k == 1:
        return [best[0]]
    if not anchors:
        return [keep[round(i * (len(keep) - 1) / (k - 1))][0] for i in range(k)]
    chosen = [best]
    for anchor in sorted(set(anchors), reverse=True):
        reach = [x for x in keep if x[2] >= anchor and x not in chosen]
        if reach and len(chosen) < k:
            chosen.append(reach[0])  # (keep is sorted by cost)
    rest = [x for x in keep if x not in chosen]
    need = k - len(chosen)
    if need > 0 and rest:
        chosen += [rest[round(i * (len(rest) - 1) / max(1, need - 1))] for i in range(min(need, len(rest)))]
    return [x[0] for x in sorted(chosen, key=lambda x: (x[1], -x[2], x[0].number))]


def program_draw(source: str) -> Callable[[optuna.Trial], dict[str, Any]]:
    """A trial's parameters from cache program ``source``'s ``space`` (in the sandbox)."""
    def draw(trial: optuna.Trial) -> dict[str, Any]:
        result = suggest_params(source, trial)
        return drawn(result)

    return draw


def tune(source: str, study_name: str, *, storage: Any, sampler: str, seed: int, n_trials: int,
         tasks: Sequence[Task], fidelity_tasks: int, evaluate: Evaluate, reference: Reference,
         seed_name: str | None = None, screen: Screen | None = None) -> TuneResult[Metrics]:
    """Tune cache program ``source`` on the train ``tasks`` (``rsi.tuning.run_study``, stages of
    :class:`TaskScoring`).

    ``study_name`` must be new in ``storage`` (a resumed search uses a new name per attempt);
    the sampler's seed derives from ``seed`` and ``seed_name`` (default: the study name), so a
    replayed study draws the same parameters.

    With ``screen`` (the evaluation cascade): a study ``<study_name>-proxy`` of ``screen.trials``
    trials scores each drawn parameter set at the zero-forward fidelity on all ``tasks``; the
    :func:`promoted` sets are then enqueued, in that order, in the model study ``study_name``
    (``n_trials`` is not used), where they meet the model as above (first ``fidelity_tasks``, then
    all). Every proxy trial is in ``TuneResult.screened`` (``screened`` or ``screened_out``).
    """
    name = seed_name or study_name
    screened: list[TrialOutcome[Metrics]] = []
    proxy_of: dict[str, Metrics] = {}
    if screen is not None:
        proxy_sampler = make_sampler(sampler, study_seed(seed, name + "-proxy"))
        screened = _screen(source, study_name + "-proxy", screen.storage or storage, proxy_sampler, tasks, screen)
        chosen = {o.number for o in promoted(screened, screen.promote, screen.margin, screen.anchors)}
        screened = [replace(o, state="screened") if o.number in chosen else o for o in screened]
    scoring = TaskScoring(tasks, fidelity_tasks, evaluate, reference)
    study = optuna.create_study(study_name=study_name, storage=storage, directions=list(scoring.directions),
                                sampler=make_sampler(sampler, study_seed(seed, name)))
    if screen is not None:
        for o in (o for o in screened if o.state == "screened"):
            study.enqueue_trial(o.suggested)
            assert o.proxy is not None
            proxy_of[_params_key(o.params)] = o.proxy
        n_trials = len(proxy_of)
    result = run_study(study, n_trials, program_draw(source), scoring)

    def with_proxy(o: TrialOutcome[Metrics]) -> TrialOutcome[Metrics]:
        return replace(o, proxy=proxy_of.get(_params_key(o.params))) if o.state == "complete" else o

    return TuneResult([with_proxy(o) for o in result.best], [with_proxy(o) for o in result.trials], screened)


def _screen(source: str, study_name: str, storage: Any, sampler: optuna.samplers.BaseSampler,
            tasks: Sequence[Task], screen: Screen) -> list[TrialOutcome[Metrics]]:
    """The proxy study: every trial's parameters at the zero-forward fidelity on all ``tasks``.

    It runs in memory and is written to ``storage`` as ``study_name`` once it ends, one record per
    trial: the proxy trials cost milliseconds, and a storage write per parameter (Optuna's way
    during a study) would cost more than the trial. A screen is all or nothing anyway: its
    outcomes are returned only when it ends. In a journal file the records are made durable by
    one ``fsync`` at the end, not one per record (:class:`rsi._journal.Journal`).
    """
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    outcomes: dict[int, TrialOutcome[Metrics]] = {}
    draw = program_draw(source)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = draw_or_fail(trial, draw, outcomes)
        results = screen.evaluate(params, tasks)
        metrics = aggregate(results)
        bad = next((r for r in results if not r.ok), None)
        if bad is not None or not metrics.ok:
            fail(trial, params, (bad.error if bad else None) or "no probes predicted", outcomes)
        trial.set_user_attr("fidelity", "proxy")
        outcomes[trial.number] = TrialOutcome(trial.number, params, "screened_out", "not promoted to the model",
                                              None, metrics, dict(trial.params))
        return metrics.cost_cents_mean, metrics.pass_rate

    t0 = time.perf_counter()
    study.optimize(objective, n_trials=screen.trials, catch=(CandidateFailure,))
    with storage.synced_once() if isinstance(storage, Journal) else contextlib.nullcontext():
        stored = optuna.create_study(study_name=study_name, storage=storage, directions=["minimize", "maximize"])
        stored.add_trials(study.get_trials(deepcopy=False))
    if screen.timed is not None:
        screen.timed(time.perf_counter() - t0)
    return [outcomes[n] for n in sorted(outcomes)]
