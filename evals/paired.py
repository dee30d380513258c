"""Paired comparison of two policies over the same tasks, with percentile-bootstrap intervals.

Two policies A (the policy) and B (the comparator) evaluated on the same ``n`` tasks give, per
task ``t``, a cost ``a_t``, ``b_t`` (cents), passed probes ``p_t``, ``q_t`` and probe counts
``m_t``, ``k_t`` (equal when the tasks are, but not assumed). The statistics are ratios of sums,
so they equal the difference of the aggregate metrics a search reports (mean cost per task,
micro-averaged pass rate)::

    cost_delta_pct = 100 * (sum_t a_t / sum_t b_t - 1)
    pass_delta     = sum_t p_t / sum_t m_t  -  sum_t q_t / sum_t k_t

Their 95% intervals come from the paired bootstrap: ``samples`` times, draw ``n`` task indices
uniformly with replacement (one draw serves both policies, so a task's pair stays together),
recompute both statistics on the draw; the interval is the 2.5th and 97.5th percentile of those
values (numpy's default linear interpolation). Draws come from ``numpy.random.default_rng(seed)``,
so the same inputs and seed give the same intervals. These are the intervals of
``scipy.stats.bootstrap(..., paired=True, method="percentile")`` up to resampling noise
(tests/evals/test_paired.py); every result reports percentile intervals, not BCa. The draw is this
module's own because pooling needs a stratified resample, which scipy's does not offer; the
survival track (traces) and probe-free fidelity (conversations) draw with :func:`stratified_draws` too.

Several independent comparisons (for example the policy each of several searches chose, each
against the same expert on its own held-out tasks) pool with :func:`pooled_bootstrap`: the same
statistics over the union of their tasks, the bootstrap drawing each group's tasks from that group
only (a stratified bootstrap: every resample keeps each group's size, so a group's policy meets
exactly as many of its own tasks as it was evaluated on).

What this module is not: a test of many comparisons at once (no multiplicity correction), nor a
choice of which policies to compare (the caller decides).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import AKVError
from evals.cache.evaluator import TaskResult

PASS_MARGIN = -0.05
"""A comparison is significant when the cost interval excludes 0 and the pass interval's lower
bound is at least this (the policy may lose at most 5 points of pass rate)."""
MIN_TASKS = 5
"""Fewer paired tasks are never significant: a bootstrap over 1-4 tasks has so few distinct
resamples that its interval is far too narrow (over one task it is a point)."""


class PairingError(AKVError):
    """Inputs that cannot be paired: lengths differ, tasks differ, or a value is out of range."""


@dataclass(frozen=True)
class PairedTasks:
    """Per-task outcomes of a policy (``a``) and a comparator (``b``) on the same tasks, in task order."""

    task_ids: tuple[str, ...]
    cost_a: tuple[float, ...]
    cost_b: tuple[float, ...]
    passed_a: tuple[int, ...]
    passed_b: tuple[int, ...]
    probes_a: tuple[int, ...]
    probes_b: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.task_ids)
        for name in ("cost_a", "cost_b", "passed_a", "passed_b", "probes_a", "probes_b"):
            if len(getattr(self, name)) != n:
                raise PairingError(f"{name} has {len(getattr(self, name))} values for {n} tasks",
                                   field=name, value=len(getattr(self, name)))
        if n == 0:
            raise PairingError("no tasks to pair", field="task_ids", value=0)
        if len(set(self.task_ids)) != n:
            raise PairingError("task ids repeat", field="task_ids", value=list(self.task_ids))
        for name in ("cost_a", "cost_b"):
            bad = next((v for v in getattr(self, name) if not (math.isfinite(v) and v > 0)), None)
            if bad is not None:
                raise PairingError(f"{name} must be finite and > 0 for every task, got {bad!r}", field=name, value=bad)
        for passed, probes, side in ((self.passed_a, self.probes_a, "a"), (self.passed_b, self.probes_b, "b")):
            for t, p, m in zip(self.task_ids, passed, probes, strict=True):
                if not (isinstance(p, int) and isinstance(m, int) and m >= 1 and 0 <= p <= m):
                    raise PairingError(f"task {t!r} ({side}): need 0 <= passed <= probes and probes >= 1, "
                                       f"got passed={p!r}, probes={m!r}", field=f"passed_{side}", value=p)

    @property
    def n(self) -> int:
        return len(self.task_ids)


@dataclass(frozen=True)
class PairedDelta:
    """Point estimates and 95% percentile-bootstrap intervals (see the module docstring)."""

    cost_delta_pct: float
    cost_delta_ci95: tuple[float, float]
    pass_delta: float
    pass_delta_ci95: tuple[float, float]
    n_tasks: int
    samples: int

    @property
    def significant(self) -> bool:
        """The cost interval excludes 0 and the pass interval's lower bound is >= :data:`PASS_MARGIN`
        (and at least :data:`MIN_TASKS` tasks were paired)."""
        low, high = self.cost_delta_ci95
        return (low > 0 or high < 0) and self.pass_delta_ci95[0] >= PASS_MARGIN and self.n_tasks >= MIN_TASKS


def pair_results(a: Sequence[TaskResult], b: Sequence[TaskResult]) -> PairedTasks:
    """Pair two policies' results by task id (order of ``a``).

    Raises:
        PairingError: a result failed (``ok`` false), a task id repeats, or the two sets of tasks differ.
    """
    for side, rs in (("a", a), ("b", b)):
        bad = next((r for r in rs if not r.ok), None)
        if bad is not None:
            raise PairingError(f"result of task {bad.task_id!r} ({side}) failed: {bad.error}", field=side,
                               value=bad.task_id)
    by_b = {r.task_id: r for r in b}
    ids = [r.task_id for r in a]
    if len(by_b) != len(b) or sorted(ids) != sorted(by_b):
        raise PairingError(f"the two policies were evaluated on different tasks: {sorted(ids)} vs {sorted(by_b)}",
                           field="tasks", value=sorted(set(ids) ^ set(by_b)))
    bs = [by_b[t] for t in ids]
    return PairedTasks(tuple(ids), tuple(r.cost_cents for r in a), tuple(r.cost_cents for r in bs),
                       tuple(r.n_passed for r in a), tuple(r.n_passed for r in bs),
                       tuple(len(r.probes) for r in a), tuple(len(r.probes) for r in bs))


def _stats(cost_a: np.ndarray, cost_b: np.ndarray, pa: np.ndarray, pb: np.ndarray, ma: np.ndarray,
           mb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both statistics along the last axis (one value per row)."""
    cost = 100.0 * (cost_a.sum(-1) / cost_b.sum(-1) - 1.0)
    passed = pa.sum(-1) / ma.sum(-1) - pb.sum(-1) / mb.sum(-1)
    return cost, passed


def paired_bootstrap(tasks: PairedTasks, *, samples: int = 2000, seed: int = 0) -> PairedDelta:
    """Cost change (percent) and pass-rate change of ``a`` against ``b`` with 95% bootstrap intervals.

    Args:
        tasks: the paired per-task outcomes.
        samples: bootstrap resamples (>= 100).
        seed: seed of the ``numpy.random.Generator`` that draws the resamples.

    Raises:
        PairingError: ``samples`` < 100.
    """
    check_samples(samples)
    return _delta(_arrays(tasks), stratified_draws([tasks.n], samples, seed), tasks.n)


def pooled_bootstrap(groups: Sequence[PairedTasks], *, samples: int = 2000, seed: int = 0) -> PairedDelta:
    """:func:`paired_bootstrap` over the union of ``groups``' tasks, each resample drawing every
    group's tasks from that group (module docstring). One group gives exactly
    ``paired_bootstrap(group)`` (the same draws).

    Raises:
        PairingError: no group, ``samples`` < 100, or a task id in two groups (it would count twice).
    """
    if not groups:
        raise PairingError("no comparisons to pool", field="groups", value=0)
    check_samples(samples)
    seen: dict[str, int] = {}
    for g, group in enumerate(groups):
        for t in group.task_ids:
            if t in seen:
                raise PairingError(f"task {t!r} is in comparisons {seen[t]} and {g}: pooled tasks must be distinct",
                                   field="task_ids", value=t)
            seen[t] = g
    arrays = [np.concatenate(column) for column in zip(*(_arrays(g) for g in groups), strict=True)]
    return _delta(arrays, stratified_draws([g.n for g in groups], samples, seed), len(seen))


def stratified_draws(sizes: Sequence[int], samples: int, seed: int) -> np.ndarray:
    """Bootstrap indices [samples, sum(sizes)] into the concatenation of groups of ``sizes``: each
    resample draws every group's items from that group, with replacement. One group is the plain
    bootstrap draw ``default_rng(seed).integers(0, n, size=(samples, n))``."""
    rng = np.random.default_rng(seed)
    offsets = np.cumsum([0, *sizes])
    return np.concatenate([offsets[i] + rng.integers(0, n, size=(samples, n)) for i, n in enumerate(sizes)], axis=1)


def check_samples(samples: object) -> None:
    """Refuse a bootstrap size that is not an integer >= 100 (a bool is below it either way).

    Raises:
        PairingError: naming the value.
    """
    if not isinstance(samples, int) or samples < 100:
        raise PairingError(f"samples must be an integer >= 100, got {samples!r}", field="samples", value=samples)


def _arrays(tasks: PairedTasks) -> list[np.ndarray]:
    """The per-task columns :func:`_stats` takes, in its order."""
    return [np.asarray(v, dtype=np.float64) for v in (tasks.cost_a, tasks.cost_b, tasks.passed_a, tasks.passed_b,
                                                      tasks.probes_a, tasks.probes_b)]


def _delta(arrays: list[np.ndarray], idx: np.ndarray, n_tasks: int) -> PairedDelta:
    """Both statistics on ``arrays`` with 95% intervals over the resamples ``idx`` (one row each)."""
    cost, passed = _stats(*arrays)
    boot_cost, boot_pass = _stats(*(x[idx] for x in arrays))
    c_lo, c_hi = np.quantile(boot_cost, [0.025, 0.975])
    p_lo, p_hi = np.quantile(boot_pass, [0.025, 0.975])
    return PairedDelta(float(cost), (float(c_lo), float(c_hi)), float(passed), (float(p_lo), float(p_hi)),
                       n_tasks, idx.shape[0])
