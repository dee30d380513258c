"""The statistics of ``bench.fidelity_validation``: does probe-free fidelity rank policies as probe pass does?

Inputs are arrays of policy x task: each policy's probes passed and asked on each task, and one
fidelity statistic per task (:func:`per_task`). Reported here: the Spearman rank correlation over
policies between probe pass (probes passed / asked over the tasks) and the statistic's mean over
the tasks, with a 95% percentile interval from a bootstrap over tasks (every policy's two numbers
recomputed on each draw; tasks of several suites are drawn within their suite), Kendall's tau-b
beside it (it counts tied pairs explicitly), the same Spearman over (policy, task) cells; how much
of the ordering ties leave undecided (:class:`Ties`); and each statistic's range over the policies,
naming the policies at both ends (:class:`Extent`). No model here: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import kendalltau

from evals.cache.fidelity import spearman
from evals.cache.log_fidelity import LogFidelity, passes
from evals.paired import stratified_draws

STATISTICS = ("mean_delta", "worst_delta", "bound_pass")
"""Per task: the mean and the worst per-turn change of log-likelihood per token, and 1.0 when the
task passes at the bound (no turn loses more than it)."""


def per_task(rows: Sequence[LogFidelity], bound: float) -> dict[str, np.ndarray]:
    """One policy's :data:`STATISTICS` on each of its tasks (arrays of ``len(rows)``)."""
    return {"mean_delta": np.array([r.mean_delta for r in rows]),
            "worst_delta": np.array([r.worst_delta for r in rows]),
            "bound_pass": np.array([float(passes(r, bound)) for r in rows])}


def pass_rates(passed: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """Each policy's probe pass over its tasks (policy x task arrays in, one value per policy out)."""
    return passed.sum(axis=1) / np.maximum(1, probes.sum(axis=1))


@dataclass(frozen=True)
class Ties:
    """How much of an ordering of policies ties leave undecided.

    Attributes:
        policies: how many values.
        distinct: how many different values.
        at_top: the share of policies at the top value ``top`` (probe pass 1.0 for probes).
        pairs_tied: the share of the policies' unordered pairs whose two values are equal.
    """

    policies: int
    distinct: int
    top: float
    at_top: float
    pairs_tied: float

    def as_dict(self) -> dict[str, Any]:
        return {"policies": self.policies, "distinct": self.distinct, "top": self.top, "at_top": self.at_top,
                "pairs_tied": self.pairs_tied}


def ties(values: ArrayLike, top: float = 1.0) -> Ties:
    """The :class:`Ties` of ``values`` (``at_top``: the share equal to ``top``).

    Raises:
        ValueError: fewer than two values.
    """
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        raise ValueError(f"ties need at least two values, got {len(v)}")
    _, counts = np.unique(v, return_counts=True)
    pairs = len(v) * (len(v) - 1) / 2
    return Ties(len(v), len(counts), top, float(np.mean(v == top)), float((counts * (counts - 1) / 2).sum() / pairs))


@dataclass(frozen=True)
class Extent:
    """A statistic's range over policies: its lowest and highest value and the policies at each."""

    low: float
    low_policies: tuple[str, ...]
    high: float
    high_policies: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"min": self.low, "min_policies": list(self.low_policies), "max": self.high,
                "max_policies": list(self.high_policies)}


def extent(labels: Sequence[str], values: ArrayLike) -> Extent:
    """The :class:`Extent` of ``values`` (one per label; every label at the minimum or maximum named)."""
    v = np.asarray(values, dtype=float)
    if len(labels) != len(v) or not labels:
        raise ValueError(f"extent needs one value per label, got {len(labels)} labels and {len(v)} values")
    lo, hi = float(v.min()), float(v.max())
    return Extent(lo, tuple(a for a, x in zip(labels, v) if x == lo), hi,
                  tuple(a for a, x in zip(labels, v) if x == hi))


@dataclass(frozen=True)
class RankCorrelation:
    """Probe pass against one fidelity statistic over policies (module docstring). ``draws``: the
    bootstrap draws on which both sides varied (the interval is over those)."""

    spearman: float
    ci95: tuple[float, float]
    kendall_tau_b: float
    kendall_ci95: tuple[float, float]
    spearman_cells: float
    draws: int

    def as_dict(self) -> dict[str, Any]:
        return {"spearman": self.spearman, "ci95": list(self.ci95), "kendall_tau_b": self.kendall_tau_b,
                "kendall_ci95": list(self.kendall_ci95), "spearman_cells": self.spearman_cells,
                "finite_draws": self.draws}


def _tau(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(kendalltau(x, y).statistic)  # tau-b: ties on either side corrected for


def _interval(values: np.ndarray) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    return (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if len(v) else (float("nan"), float("nan"))


def rank_correlations(passed: np.ndarray, probes: np.ndarray, stats: Mapping[str, np.ndarray], *, samples: int,
                      seed: int, groups: Sequence[int] | None = None) -> dict[str, RankCorrelation]:
    """Probe pass against each statistic of ``stats`` (module docstring).

    Args:
        passed, probes: probes passed and asked, policy x task.
        stats: name -> the statistic, policy x task.
        samples, seed: the bootstrap over tasks.
        groups: the tasks' suites as consecutive group sizes (summing to the task count): each draw
            resamples tasks within their group (``evals.paired.stratified_draws``). ``None``: one group.

    Raises:
        ValueError: the arrays' shapes differ, or ``groups`` does not sum to the task count.
    """
    n_tasks = passed.shape[1]
    sizes = list(groups or [n_tasks])
    if probes.shape != passed.shape or any(s.shape != passed.shape for s in stats.values()) or sum(sizes) != n_tasks:
        raise ValueError(f"policy x task arrays of one shape {passed.shape} and groups summing to {n_tasks} needed")
    draws = stratified_draws(sizes, samples, seed)
    out = {}
    for name, values in stats.items():
        def both(idx: np.ndarray, v: np.ndarray = values) -> tuple[np.ndarray, np.ndarray]:
            return v[:, idx].mean(axis=1), pass_rates(passed[:, idx], probes[:, idx])

        x, y = both(np.arange(n_tasks))
        boot = [both(i) for i in draws]
        rho = np.array([spearman(list(a), list(b)) for a, b in boot])
        tau = np.array([_tau(a, b) for a, b in boot])
        cells = spearman(list(values.ravel()), list((passed / np.maximum(1, probes)).ravel()))
        out[name] = RankCorrelation(spearman(list(x), list(y)), _interval(rho), _tau(x, y), _interval(tau), cells,
                                    int(np.isfinite(rho).sum()))
    return out
