"""Tuned experts: the expert policies' defining setting tuned on train, so evolved policies are
compared with the best an expert can do on the same budget, not only with its paper setting.

What is tuned (everything else keeps the configured value):

- ``rolling_drop``: K (``keep_tool_responses``), an integer in [1, 32] (widened to hold the fixed K).
- ``standard``, ``text_engineering``: ``window``, an integer on a log scale in
  [fixed / 8, fixed x 4] (the summarizing threshold is the family's ratio times the window).
- ``read_drop`` (the hand rule): its whole declared space (``read_after``, ``min_tokens``,
  ``supersede``), as a seed program is tuned.

One multi-objective Optuna study per family (cost down, pass rate up) with the config's sampler
and ``optuna.trials`` trials, the same trial budget as an evolved program; the fixed setting is
enqueued as the first trial, so the tuned expert is never worse on train than the paper setting.
Each trial is evaluated on every train task (no multi-fidelity pruning). The sampler's seed
derives from the search seed and the family, so a resumed search draws the same settings.

The choice (on train): among completed trials, the cheapest whose train pass rate is at least the
fixed setting's; ties go to the earlier trial. That is the strongest cost competitor at matched
accuracy, which is what a cost claim must beat.

:class:`Experts` puts the experts of a search in its archive: each fixed expert evaluated on train,
then each tunable one tuned (its held-out evaluation waits for the frozen picks, ``rsi.cache.protocol``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from evals.cache.evaluator import PolicySpec, TaskResult
from evals.tasks.schema import Task
from rsi.archive import Status, candidate_id
from rsi.cache.archive import Archive, Candidate
from rsi.cache.evaluations import Evaluations
from rsi.cache.metrics import Metrics, aggregate
from rsi.tracking import Tracker
from rsi.tuning import make_sampler, study_seed
from search_spaces import get_family, get_policy

TUNED: dict[str, str | None] = {"rolling_drop": "keep_tool_responses", "standard": "window",
                                "text_engineering": "window", "read_drop": None}
"""Family -> the parameter a tuned expert tunes (``None``: every parameter of the family's space)."""


class ExpertTrialFailed(Exception):
    """A trial whose evaluation failed on some task (recorded by Optuna as FAIL, the study goes on)."""


@dataclass(frozen=True)
class ExpertTrial:
    number: int
    params: dict[str, Any]
    train: Metrics | None
    reason: str = ""


@dataclass(frozen=True)
class TunedExpert:
    """The chosen setting of one family (``best`` is ``None`` when every trial failed)."""

    family: str
    fixed: dict[str, Any]
    best: ExpertTrial | None
    trials: tuple[ExpertTrial, ...]

    @property
    def label(self) -> str:
        return f"expert:{self.family} (tuned)"

    @property
    def tuned(self) -> str:
        """What was tuned, in words: ``keep_tool_responses`` or ``its whole space``."""
        return TUNED[self.family] or "its whole space"

    def setting(self) -> str:
        """The chosen values of what was tuned (``name=value``, comma-separated)."""
        chosen = self.fixed | (self.best.params if self.best is not None else {})
        one = TUNED[self.family]
        names = [one] if one else sorted(self.fixed)
        return ", ".join(f"{n}={chosen.get(n)}" for n in names)


def tunable(spec: PolicySpec) -> bool:
    return spec.name in TUNED and spec.source is None


def fixed_params(spec: PolicySpec) -> dict[str, Any]:
    """The expert's full parameters as built (defaults filled), e.g. K=12 or the family's default window."""
    return dict(get_policy(spec.name, **dict(spec.params)).params)


def space(spec: PolicySpec) -> Callable[[Any], dict[str, Any]]:
    """The tuned expert's Optuna space: ``spec``'s parameters with its family's one setting drawn."""
    name = TUNED[spec.name]
    base = dict(spec.params)
    if name is None:
        family_space, fixed_all = get_family(spec.name).space, fixed_params(spec)

        def draw_all(trial: Any) -> dict[str, Any]:
            params = family_space(trial)
            return dict(base) if params == fixed_all else base | params

        return draw_all
    fixed = int(fixed_params(spec)[name])
    if spec.name == "rolling_drop":
        lo, hi, log = min(1, fixed), max(32, fixed), False
    else:
        lo, hi, log = max(16, fixed // 8), fixed * 4, True

    def draw(trial: Any) -> dict[str, Any]:  # an optuna Trial or FixedTrial
        value = trial.suggest_int(name, lo, hi, log=log)
        # The fixed value keeps the fixed expert's exact parameters, so its train results come from the store.
        return dict(base) if value == fixed and name not in base else base | {name: value}

    return draw


def choose(trials: Sequence[ExpertTrial], fixed_pass: float | None) -> ExpertTrial | None:
    """The cheapest completed trial with train pass >= ``fixed_pass`` (``None``: the fixed setting
    failed, so the best pass rate wins, then cost); ties go to the earlier trial."""
    done = [t for t in trials if t.train is not None and t.train.ok]
    if not done:
        return None
    if fixed_pass is not None:
        matched = [t for t in done if t.train is not None and t.train.pass_rate >= fixed_pass]
        if matched:
            return min(matched, key=lambda t: (t.train.cost_cents_mean if t.train else 0.0, t.number))
    return min(done, key=lambda t: (-t.train.pass_rate if t.train else 0.0,
                                    t.train.cost_cents_mean if t.train else 0.0, t.number))


def tune_expert(spec: PolicySpec, *, study_name: str, storage: Any, sampler: str, seed: int, n_trials: int,
                evaluate: Callable[[PolicySpec], list[TaskResult]]) -> TunedExpert:
    """Tune ``spec``'s family setting on train (see the module docstring).

    Args:
        spec: a fixed expert whose family is in :data:`TUNED`.
        study_name: new in ``storage`` (a resumed search uses a new name per attempt).
        evaluate: ``spec -> results on every train task`` (from the search's store when known).
    """
    draw = space(spec)
    label = f"expert:{spec.name} (tuned)"
    study = optuna.create_study(study_name=study_name, storage=storage, directions=["minimize", "maximize"],
                                sampler=make_sampler(sampler, study_seed(seed, f"expert-tuned:{spec.name}")))
    name = TUNED[spec.name]
    study.enqueue_trial(fixed_params(spec) if name is None else {name: int(fixed_params(spec)[name])})
    trials: dict[int, ExpertTrial] = {}

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = draw(trial)
        results = evaluate(PolicySpec(spec.name, params, label=label))
        bad = next((r for r in results if not r.ok), None)
        metrics = aggregate(results)
        if bad is not None or not metrics.ok:
            reason = (bad.error if bad else None) or "no probes scored"
            trials[trial.number] = ExpertTrial(trial.number, params, None, reason)
            raise ExpertTrialFailed(reason)
        trials[trial.number] = ExpertTrial(trial.number, params, metrics)
        return metrics.cost_cents_mean, metrics.pass_rate

    study.optimize(objective, n_trials=n_trials, catch=(ExpertTrialFailed,))
    ordered = tuple(trials[n] for n in sorted(trials))
    first = ordered[0] if ordered else None
    fixed_pass = first.train.pass_rate if first is not None and first.train is not None else None
    return TunedExpert(spec.name, fixed_params(spec), choose(ordered, fixed_pass), ordered)


class Experts:
    """The experts of a search (``config.experts``), evaluated with ``evals`` into an archive; every
    tuning trial the model finished stays in :attr:`trials` (the cascade's first fidelity points)."""

    def __init__(self, experts: Sequence[str], evals: Evaluations, tracker: Tracker, say: Callable[[str], None]):
        self.experts = tuple(experts)
        self.evals = evals
        self.tracker = tracker
        self.say = say
        self.trials: list[tuple[PolicySpec, float]] = []  # expert-tuning trials finished: model train pass

    def evaluate(self, archive: Archive, train: list[Task]) -> None:
        """Each expert on ``train`` (its held-out evaluation waits for the frozen picks)."""
        for text in self.experts:
            spec = PolicySpec.parse(text)
            with self.evals.progress.unit(len(train)):
                results = self.evals.evaluate(spec, train)
            m_train = aggregate(results)
            status = Status.OK if m_train.ok else Status.FAILED
            c = Candidate(candidate_id(spec.name, dict(spec.params)), spec.name, spec.display, dict(spec.params), 0,
                          proposer="expert", train=m_train, status=status,
                          reason="" if m_train.ok else "expert evaluation failed", expert=True, spec=spec.name)
            archive.add(c)
            self.tracker.candidate(c, None, results)
            self.say(f"  expert {spec.display:44s} train pass {m_train.pass_rate:.3f} cost "
                     f"{m_train.cost_cents_mean:.4f}c")

    def tune(self, archive: Archive, train: list[Task], *, storage: Any, sampler: str, seed: int, n_trials: int,
             attempt: int) -> None:
        """Tune each tunable expert's setting on ``train`` (:func:`tune_expert`, a study per family and
        ``attempt``); the choice joins ``archive`` and is evaluated on held-out with the other frozen picks."""
        seen: set[str] = set()
        for text in self.experts:
            spec = PolicySpec.parse(text)
            if not tunable(spec) or spec.name in seen:
                continue
            seen.add(spec.name)
            planned = n_trials * len(train)
            self.evals.progress.replan(planned)
            with self.evals.progress.unit(planned):
                tuned = tune_expert(spec, study_name=f"expert-tuned:{spec.name}-a{attempt}", storage=storage,
                                    sampler=sampler, seed=seed, n_trials=n_trials,
                                    evaluate=lambda s: self.evals.evaluate(s, train))
                self.trials += [(PolicySpec(spec.name, t.params), t.train.pass_rate) for t in tuned.trials
                                if t.train is not None and t.train.ok]
                if tuned.best is None or tuned.best.train is None:
                    reason = next((t.reason for t in tuned.trials if t.reason), "no trial finished")
                    self.say(f"  expert {tuned.label:44s} not tuned: {reason}")
                    continue
                best = PolicySpec(spec.name, tuned.best.params, label=tuned.label)
            c = Candidate(candidate_id(f"{spec.name}:tuned", tuned.best.params), spec.name, tuned.label,
                          tuned.best.params, 0, proposer="expert-tuned", train=tuned.best.train,
                          expert=True, spec=spec.name,
                          reason=f"tuned {tuned.tuned} on train with {len(tuned.trials)} trials")
            archive.add(c)
            self.tracker.candidate(c, None, self.evals.evaluate(best, train))
            self.say(f"  expert {tuned.label:44s} train pass {tuned.best.train.pass_rate:.3f} cost "
                     f"{tuned.best.train.cost_cents_mean:.4f}c ({tuned.setting()})")
