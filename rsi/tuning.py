"""Optuna tuning of one program's declared parameters: cost down, pass rate up.

One multi-objective study per program. A trial draws its parameters by running the program's
``space(trial)`` in the sandbox, evaluates them on the first ``fidelity_tasks`` train tasks, and
is pruned when that partial result is already dominated by the archive's front on the same
tasks (multi-fidelity); otherwise it is evaluated on every train task. A program whose space or
decisions fail makes a FAIL trial with its reason, and the study goes on: ``suggest_params`` never
raises for what a ``space`` does (bounds Optuna cannot hold, endless suggesting, exceptions), so
no program ends a search, in generation 0, ``seed_from`` imports, proposals or a resume.
``study.best_trials`` are what enter the archive.

The evaluation cascade (``screen``, a :class:`Screen`): before any model evaluation, a proxy
study draws many parameter sets and scores each at the zero-forward fidelity (``evals.cache.fidelity``:
exact cost, pass predicted from which evidence stays attended); only the sets no other one beats
by a margin are enqueued in the model study. Proxy numbers stay in ``TrialOutcome.proxy``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import optuna

from evals.cache.evaluator import TaskResult
from evals.tasks.schema import Task
from rsi._journal import Journal
from rsi.metrics import Metrics, aggregate
from rsi.pareto import dominates
from search_spaces import suggest_params

optuna.logging.set_verbosity(logging.ERROR)  # failed trials are recorded and summarized by the search itself

Evaluate = Callable[[dict[str, Any], Sequence[Task]], list[TaskResult]]
"""(params, tasks) -> results of the program under tuning."""
Reference = Callable[[Sequence[Task]], list[tuple[float, float]]]
"""tasks -> (cost, pass) of the current front on exactly those tasks."""


class CandidateFailure(Exception):
    """A trial whose program failed (refused space, crash, invalid decision): recorded, not scored."""


@dataclass(frozen=True)
class TrialOutcome:
    """What one trial did.

    ``state``: ``complete``, ``pruned``, ``failed`` (model trials) or ``screened`` (a proxy trial
    promoted to the model), ``screened_out`` (a proxy trial that was not). ``train`` holds model
    numbers only; ``proxy`` the zero-forward prediction on the same train tasks (``pass_rate`` there
    is a *predicted* pass rate, never reported as one).
    """

    number: int
    params: dict[str, Any]
    state: str
    reason: str
    train: Metrics | None
    proxy: Metrics | None = None
    suggested: dict[str, Any] = field(default_factory=dict)
    """Optuna's own record of the draw (suggestion name -> value), to enqueue it in another study."""


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


@dataclass(frozen=True)
class TuneResult:
    """``best``: the model study's Pareto trials; ``trials``: its trials; ``screened``: the proxy
    study's trials (empty without a screen)."""

    best: list[TrialOutcome]
    trials: list[TrialOutcome]
    screened: list[TrialOutcome] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return not self.best


def make_storage(kind: str, run_dir: Path, name: str = "optuna") -> Any:
    """``sqlite`` (one writer), ``journal`` (a file many processes may share) or a database URL;
    the files are ``<name>.db`` and ``<name>.journal`` in ``run_dir``."""
    if kind == "sqlite":
        return optuna.storages.RDBStorage(f"sqlite:///{run_dir / (name + '.db')}")
    if kind == "journal":
        return Journal(str(run_dir / (name + ".journal")))
    return kind


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=4)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=2, multivariate=True)


def study_seed(base: int, name: str) -> int:
    return (base * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)) % (2**31)


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


def tune(source: str, study_name: str, *, storage: Any, sampler: str, seed: int, n_trials: int,
         tasks: Sequence[Task], fidelity_tasks: int, evaluate: Evaluate, reference: Reference,
         seed_name: str | None = None, screen: Screen | None = None) -> TuneResult:
    """Tune ``source`` (see the module docstring).

    ``study_name`` must be new in ``storage`` (a resumed search uses a new name per attempt);
    the sampler's seed derives from ``seed`` and ``seed_name`` (default: the study name), so a
    replayed study draws the same parameters.

    With ``screen`` (the evaluation cascade): a study ``<study_name>-proxy`` of ``screen.trials``
    trials scores each drawn parameter set at the zero-forward fidelity on all ``tasks``; the
    :func:`promoted` sets are then enqueued, in that order, in the model study ``study_name``
    (``n_trials`` is not used), where they meet the model as above (first ``fidelity_tasks``, then
    all). Every proxy trial is in ``TuneResult.trials`` (``screened`` or ``screened_out``).
    """
    name = seed_name or study_name
    screened: list[TrialOutcome] = []
    if screen is not None:
        proxy_sampler = make_sampler(sampler, study_seed(seed, name + "-proxy"))
        screened = _screen(source, study_name + "-proxy", screen.storage or storage, proxy_sampler, tasks, screen)
        chosen = promoted(screened, screen.promote, screen.margin, screen.anchors)
        chosen_numbers = {o.number for o in chosen}
        screened = [replace(o, state="screened") if o.number in chosen_numbers else o for o in screened]
    study = optuna.create_study(study_name=study_name, storage=storage, directions=["minimize", "maximize"],
                                sampler=make_sampler(sampler, study_seed(seed, name)))
    outcomes: dict[int, TrialOutcome] = {}
    k = fidelity_tasks if 0 < fidelity_tasks < len(tasks) else len(tasks)
    proxy_of: dict[str, Metrics] = {}
    if screen is not None:
        for o in (o for o in screened if o.state == "screened"):
            study.enqueue_trial(o.suggested)
            assert o.proxy is not None
            proxy_of[_params_key(o.params)] = o.proxy
        n_trials = len(proxy_of)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = _draw(source, trial, outcomes)
        trial.set_user_attr("params", params)
        first = evaluate(params, tasks[:k])
        bad = next((r for r in first if not r.ok), None)
        if bad is not None:
            _fail(trial, params, bad.error or "evaluation failed", outcomes)
        if k < len(tasks):
            partial = aggregate(first)
            point = (partial.cost_cents_mean, partial.pass_rate)
            if any(dominates(ref, point) for ref in reference(tasks[:k])):
                trial.set_user_attr("pruned_after_tasks", k)
                outcomes[trial.number] = TrialOutcome(trial.number, params, "pruned",
                                                      f"dominated after {k} tasks", partial)
                raise optuna.TrialPruned()
        metrics = _scored(trial, params, first + evaluate(params, tasks[k:]), outcomes, "no probes scored")
        outcomes[trial.number] = TrialOutcome(trial.number, params, "complete", "", metrics,
                                              proxy_of.get(_params_key(params)))
        return metrics.cost_cents_mean, metrics.pass_rate

    if n_trials > 0:
        study.optimize(objective, n_trials=n_trials, catch=(CandidateFailure,))
    best_numbers = {t.number for t in study.best_trials} if n_trials > 0 else set()
    trials = [outcomes[n] for n in sorted(outcomes)]
    best = [o for o in trials if o.number in best_numbers and o.state == "complete"]
    return TuneResult(best, trials, screened)


def _draw(source: str, trial: optuna.Trial, outcomes: dict[int, TrialOutcome]) -> dict[str, Any]:
    """The trial's parameters from the program's ``space`` (in the sandbox).

    Raises:
        CandidateFailure: the space failed; the trial is recorded as failed with the reason.
    """
    drawn = suggest_params(source, trial)
    if not drawn.ok:
        _fail(trial, {}, drawn.reason, outcomes)
    return dict(drawn.params or {})


def _scored(trial: optuna.Trial, params: dict[str, Any], results: Sequence[TaskResult],
            outcomes: dict[int, TrialOutcome], nothing: str) -> Metrics:
    """The objectives of ``results``.

    Raises:
        CandidateFailure: a result failed, or no probe was scored (``nothing`` is then the reason).
    """
    metrics = aggregate(results)
    bad = next((r for r in results if not r.ok), None)
    if bad is not None or not metrics.ok:
        _fail(trial, params, (bad.error if bad else None) or nothing, outcomes)
    return metrics


def _fail(trial: optuna.Trial, params: dict[str, Any], reason: str, outcomes: dict[int, TrialOutcome]) -> NoReturn:
    trial.set_user_attr("reason", reason)
    outcomes[trial.number] = TrialOutcome(trial.number, params, "failed", reason, None)
    raise CandidateFailure(reason)


def _screen(source: str, study_name: str, storage: Any, sampler: optuna.samplers.BaseSampler,
            tasks: Sequence[Task], screen: Screen) -> list[TrialOutcome]:
    """The proxy study: every trial's parameters at the zero-forward fidelity on all ``tasks``.

    It runs in memory and is written to ``storage`` as ``study_name`` once it ends, one record per
    trial: the proxy trials cost milliseconds, and a storage write per parameter (Optuna's way
    during a study) would cost more than the trial. A screen is all or nothing anyway: its
    outcomes are returned only when it ends. In a journal file the records are made durable by
    one ``fsync`` at the end, not one per record (:class:`rsi._journal.Journal`).
    """
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    outcomes: dict[int, TrialOutcome] = {}

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = _draw(source, trial, outcomes)
        metrics = _scored(trial, params, screen.evaluate(params, tasks), outcomes, "no probes predicted")
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
