"""Optuna tuning of one program's declared parameters: cost down, pass rate up.

One multi-objective study per program. A trial draws its parameters by running the program's
``space(trial)`` in the sandbox, evaluates them on the first ``fidelity_tasks`` train tasks, and
is pruned when that partial result is already dominated by the archive's front on the same
tasks (multi-fidelity); otherwise it is evaluated on every train task. A program whose space or
decisions fail makes a FAIL trial with its reason, and the study goes on: ``suggest_params`` never
raises for what a ``space`` does (bounds Optuna cannot hold, endless suggesting, exceptions), so
no program ends a search, in generation 0, ``seed_from`` imports, proposals or a resume.
``study.best_trials`` are what enter the archive.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from evals.replay import TaskResult
from evals.tasks.schema import Task
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
    """What one trial did."""

    number: int
    params: dict[str, Any]
    state: str
    reason: str
    train: Metrics | None


@dataclass(frozen=True)
class TuneResult:
    best: list[TrialOutcome]
    trials: list[TrialOutcome]

    @property
    def failed(self) -> bool:
        return not self.best


def make_storage(kind: str, run_dir: Path) -> Any:
    """``sqlite`` (one writer), ``journal`` (a file many processes may share) or a database URL."""
    if kind == "sqlite":
        return f"sqlite:///{run_dir / 'optuna.db'}"
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(str(run_dir / "optuna.journal")))
    return kind


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=4)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=2, multivariate=True)


def study_seed(base: int, name: str) -> int:
    return (base * 1_000_003 + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)) % (2**31)


def tune(source: str, study_name: str, *, storage: Any, sampler: str, seed: int, n_trials: int,
         tasks: Sequence[Task], fidelity_tasks: int, evaluate: Evaluate, reference: Reference,
         seed_name: str | None = None) -> TuneResult:
    """Tune ``source`` (see the module docstring).

    ``study_name`` must be new in ``storage`` (a resumed search uses a new name per attempt);
    the sampler's seed derives from ``seed`` and ``seed_name`` (default: the study name), so a
    replayed study draws the same parameters.
    """
    study = optuna.create_study(study_name=study_name, storage=storage, directions=["minimize", "maximize"],
                                sampler=make_sampler(sampler, study_seed(seed, seed_name or study_name)))
    outcomes: dict[int, TrialOutcome] = {}
    k = fidelity_tasks if 0 < fidelity_tasks < len(tasks) else len(tasks)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        drawn = suggest_params(source, trial)
        if not drawn.ok:
            trial.set_user_attr("reason", drawn.reason)
            outcomes[trial.number] = TrialOutcome(trial.number, {}, "failed", drawn.reason, None)
            raise CandidateFailure(drawn.reason)
        params = dict(drawn.params or {})
        trial.set_user_attr("params", params)
        first = evaluate(params, tasks[:k])
        bad = next((r for r in first if not r.ok), None)
        if bad is not None:
            reason = bad.error or "evaluation failed"
            trial.set_user_attr("reason", reason)
            outcomes[trial.number] = TrialOutcome(trial.number, params, "failed", reason, None)
            raise CandidateFailure(reason)
        if k < len(tasks):
            partial = aggregate(first)
            point = (partial.cost_cents_mean, partial.pass_rate)
            if any(dominates(ref, point) for ref in reference(tasks[:k])):
                trial.set_user_attr("pruned_after_tasks", k)
                outcomes[trial.number] = TrialOutcome(trial.number, params, "pruned",
                                                      f"dominated after {k} tasks", partial)
                raise optuna.TrialPruned()
        results = first + evaluate(params, tasks[k:])
        metrics = aggregate(results)
        bad = next((r for r in results if not r.ok), None)
        if bad is not None or not metrics.ok:
            reason = (bad.error if bad else None) or "no probes scored"
            outcomes[trial.number] = TrialOutcome(trial.number, params, "failed", reason, None)
            raise CandidateFailure(reason)
        outcomes[trial.number] = TrialOutcome(trial.number, params, "complete", "", metrics)
        return metrics.cost_cents_mean, metrics.pass_rate

    study.optimize(objective, n_trials=n_trials, catch=(CandidateFailure,))
    best_numbers = {t.number for t in study.best_trials}
    trials = [outcomes[n] for n in sorted(outcomes)]
    best = [o for o in trials if o.number in best_numbers and o.state == "complete"]
    return TuneResult(best, trials)
