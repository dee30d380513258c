"""Optuna tuning of one program's (or one family's) parameters: the tuner both tracks share.

One two-objective study per program. A trial draws its parameters (a program's ``space(trial)``
in the sandbox, or a built-in family's space), is scored on the first ``first`` units of the train
set (tasks, traces), and is pruned when a point of the archive's front on those same units
dominates it (multi-fidelity); otherwise it is scored on every unit. A draw or an evaluation that
fails makes a FAIL trial with its reason and the study goes on, so no program ends a search.
``TuneResult.best`` (the study's Pareto trials) is what enters the archive.

A track says what a unit is and how a parameter set is scored with a :class:`Scoring`: the cache
track (``rsi.cache.tuning``: cost and pass rate over tasks, and a zero-forward screen in front of
the study) and the survival track (``rsi.survival.evolve``: p95 resume TTFT and recompute tokens
over simulated traces).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, NoReturn, Protocol, TypeVar

import optuna

from rsi._journal import Journal
from rsi.pareto import dominates

optuna.logging.set_verbosity(logging.ERROR)  # failed trials are recorded and summarized by the search itself

M = TypeVar("M")
Direction = Literal["minimize", "maximize"]
Draw = Callable[[optuna.Trial], dict[str, Any]]
"""trial -> the parameters of one trial; raises :class:`CandidateFailure` when the space fails."""


class CandidateFailure(Exception):
    """A trial whose program failed (refused space, crash, invalid decision): recorded, not scored."""


@dataclass(frozen=True)
class TrialOutcome(Generic[M]):
    """What one trial did.

    ``state``: ``complete``, ``pruned``, ``failed`` (model trials) or ``screened`` (a proxy trial
    promoted to the model), ``screened_out`` (a proxy trial that was not). ``train`` holds the
    track's scores on the train units (model numbers only); ``proxy`` a zero-forward prediction on
    the same units (cache track; its ``pass_rate`` is a *predicted* pass rate, never reported as one).
    """

    number: int
    params: dict[str, Any]
    state: str
    reason: str
    train: M | None
    proxy: M | None = None
    suggested: dict[str, Any] = field(default_factory=dict)
    """Optuna's own record of the draw (suggestion name -> value), to enqueue it in another study."""


@dataclass(frozen=True)
class TuneResult(Generic[M]):
    """``best``: the model study's Pareto trials; ``trials``: its trials; ``screened``: the proxy
    study's trials (cache track; empty without a screen)."""

    best: list[TrialOutcome[M]]
    trials: list[TrialOutcome[M]]
    screened: list[TrialOutcome[M]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return not self.best


class Scoring(Protocol[M]):
    """How a track scores one parameter set on its train units, in the two stages every study runs.

    ``units``: the train set's size; ``first``: units of the first stage (the study runs one stage
    when it is 0 or at least ``units``); ``unit``: what a unit is, in reasons (``tasks``); ``directions``:
    Optuna's directions of :meth:`values`.
    """

    @property
    def units(self) -> int: ...

    @property
    def first(self) -> int: ...

    @property
    def unit(self) -> str: ...

    @property
    def directions(self) -> tuple[Direction, Direction]: ...

    def evaluate(self, params: dict[str, Any], start: int, stop: int) -> list[Any]:
        """``params``' results on the train units ``start`` to ``stop`` (one per unit)."""
        ...

    def score(self, results: Sequence[Any]) -> M:
        """The track's scores of ``results``."""
        ...

    def refusal(self, results: Sequence[Any], score: M, whole: bool) -> str | None:
        """Why ``results`` (the first stage's units, or all when ``whole``) cannot be scored (``None``: they can)."""
        ...

    def point(self, score: M) -> tuple[float, float]:
        """``score`` as (lower is better, higher is better), the orientation of :func:`rsi.pareto.dominates`."""
        ...

    def values(self, score: M) -> tuple[float, float]:
        """The study's two objective values of ``score``."""
        ...

    def reference(self, k: int) -> Sequence[M]:
        """The archive front's scores on the first ``k`` train units (the ones that could be scored)."""
        ...


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


class Drawn(Protocol):
    """What a sandboxed ``space(trial)`` gives back (either track's result of a draw)."""

    @property
    def ok(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Any] | None: ...


def drawn(result: Drawn) -> dict[str, Any]:
    """The parameters a sandboxed ``space(trial)`` drew.

    Raises:
        CandidateFailure: the space failed, with its reason.
    """
    if not result.ok:
        raise CandidateFailure(result.reason)
    return dict(result.params or {})


def fail(trial: optuna.Trial, params: dict[str, Any], reason: str, outcomes: dict[int, TrialOutcome[M]]) -> NoReturn:
    """Record ``trial`` as failed with ``reason`` (in the study and in ``outcomes``) and end it.

    Raises:
        CandidateFailure: always (a study's ``catch`` keeps it going).
    """
    trial.set_user_attr("reason", reason)
    outcomes[trial.number] = TrialOutcome(trial.number, params, "failed", reason, None)
    raise CandidateFailure(reason)


def draw_or_fail(trial: optuna.Trial, draw: Draw, outcomes: dict[int, TrialOutcome[M]]) -> dict[str, Any]:
    """``draw(trial)``; a space that fails makes ``trial`` a recorded failure (:func:`fail`)."""
    try:
        return draw(trial)
    except CandidateFailure as err:
        fail(trial, {}, str(err), outcomes)


def run_study(study: optuna.Study, n_trials: int, draw: Draw, scoring: Scoring[M]) -> TuneResult[M]:
    """``n_trials`` trials of ``study`` (its directions: ``scoring.directions``; enqueued trials
    first), each drawn by ``draw`` and scored by ``scoring`` in two stages (module docstring)."""
    outcomes: dict[int, TrialOutcome[M]] = {}
    k = scoring.first if 0 < scoring.first < scoring.units else scoring.units

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = draw_or_fail(trial, draw, outcomes)
        trial.set_user_attr("params", params)
        first = scoring.evaluate(params, 0, k)
        partial = scoring.score(first)
        reason = scoring.refusal(first, partial, k == scoring.units)
        if reason is not None:
            fail(trial, params, reason, outcomes)
        if k < scoring.units:
            point = scoring.point(partial)
            if any(dominates(scoring.point(ref), point) for ref in scoring.reference(k)):
                trial.set_user_attr(f"pruned_after_{scoring.unit}", k)
                outcomes[trial.number] = TrialOutcome(trial.number, params, "pruned",
                                                      f"dominated after {k} {scoring.unit}", partial)
                raise optuna.TrialPruned()
            whole = first + scoring.evaluate(params, k, scoring.units)
            score = scoring.score(whole)
            reason = scoring.refusal(whole, score, True)
            if reason is not None:
                fail(trial, params, reason, outcomes)
        else:
            score = partial
        outcomes[trial.number] = TrialOutcome(trial.number, params, "complete", "", score)
        return scoring.values(score)

    if n_trials > 0:
        study.optimize(objective, n_trials=n_trials, catch=(CandidateFailure,))
    best_numbers = {t.number for t in study.best_trials} if n_trials > 0 else set()
    trials = [outcomes[n] for n in sorted(outcomes)]
    return TuneResult([o for o in trials if o.number in best_numbers and o.state == "complete"], trials)
