"""``bench.fidelity_validation``'s suite mode: policies evaluated here, with probes and by fidelity.

No run directory is read: each policy (``PolicySpec`` in the config notation; :data:`SPREAD` by
default) is evaluated with the model on the same train tasks of each suite twice, by the probes (the
evaluator's pass, ``Replay.evaluate_policies``, as a search scores its train tasks) and without them
(``evals.cache.log_fidelity.measure``: each recorded assistant turn under the policy against the full
cache), both under the frame guard. :func:`report` turns the arrays into the statistics of
``bench.fidelity_stats``, per suite and pooled over the suites (a policy's probe pass and fidelity
over all their tasks; the bootstrap resamples tasks within each suite).

Not for judging a search's policies (they come from run directories: the run mode does that).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.fidelity_stats import STATISTICS, extent, pass_rates, per_task, rank_correlations, ties
from evals.cache.evaluator import PolicySpec, Replay
from evals.cache.log_fidelity import LogFidelity, measure
from evals.tasks.schema import Task

SPREAD = (
    "full",
    *(f"rolling_drop:keep_tool_responses={k}" for k in (1, 2, 4, 8, 12)),
    "rolling_drop:keep_tool_responses=2,target=both", "rolling_drop:keep_tool_responses=4,target=assistant",
    "read_drop", "read_drop:min_tokens=8", "read_drop:min_tokens=64", "read_drop:min_tokens=1024",
    "read_drop:read_after=0,min_tokens=8", "read_drop:read_after=4", "read_drop:supersede=false",
    "thinking_drop:keep_turns=0", "thinking_drop:keep_turns=2",
    "scored_drop:budget_tokens=512", "scored_drop:budget_tokens=1024,target_ratio=0.3",
    "scored_drop:budget_tokens=2048", "scored_drop:budget_tokens=4096",
    "standard", "standard:window=2048", "text_engineering", "trim", "trim:window=2048,target_ratio=0.2",
)
"""The default policies: spread over probe pass on purpose, from the full cache to settings that lose
probes (rolling drop at K=1, read_drop of every read output, small KV budgets, text baselines at a
short window), every built-in family of ``akv list policies`` but the hindsight ``schedule``."""


@dataclass(frozen=True)
class SuiteEvaluation:
    """Every policy on a suite's tasks, with probes and by fidelity.

    Attributes:
        suite: its name.
        tasks: the task ids, in column order.
        labels: the policies that ran on every task, in row order.
        passed, probes: probes passed and asked, policy x task.
        stats: each of ``bench.fidelity_stats.STATISTICS``, policy x task.
        cost_cents: the session's cost under each policy, policy x task.
        failed: ``{"policy", "task", "error"}`` of each failed evaluation (its policy has no row).
        seconds: wall time with probes and by fidelity.
    """

    suite: str
    tasks: tuple[str, ...]
    labels: tuple[str, ...]
    passed: np.ndarray
    probes: np.ndarray
    stats: dict[str, np.ndarray]
    cost_cents: np.ndarray
    failed: tuple[dict[str, str], ...]
    seconds: dict[str, float]

    def __post_init__(self) -> None:
        shape = (len(self.labels), len(self.tasks))
        arrays = [self.passed, self.probes, self.cost_cents, *self.stats.values()]
        assert all(a.shape == shape for a in arrays), f"arrays not policy x task {shape}"

    def rows(self, keep: Sequence[str]) -> SuiteEvaluation:
        """The evaluation restricted to the policies ``keep`` (in that order)."""
        idx = [self.labels.index(label) for label in keep]
        return SuiteEvaluation(self.suite, self.tasks, tuple(keep), self.passed[idx], self.probes[idx],
                               {k: v[idx] for k, v in self.stats.items()}, self.cost_cents[idx], self.failed,
                               self.seconds)


def evaluate_suite(suite: str, tasks: Sequence[Task], specs: Sequence[PolicySpec], probe_replay: Replay,
                   fidelity_replay: Replay, bound: float) -> SuiteEvaluation:
    """Each of ``specs`` on each of ``tasks``: its probes by ``probe_replay`` (all policies of a task in
    lockstep) and its fidelity by ``fidelity_replay``, at ``bound`` for ``bound_pass``. A policy that
    fails on a task (``TaskResult.ok`` false) is recorded in ``failed`` and has no row."""
    failed: list[dict[str, str]] = []
    passed: dict[str, list[float]] = {s.display: [] for s in specs}
    probes: dict[str, list[float]] = {s.display: [] for s in specs}
    cost: dict[str, list[float]] = {s.display: [] for s in specs}
    fid: dict[str, list[LogFidelity]] = {s.display: [] for s in specs}
    seconds = {"probes": 0.0, "fidelity": 0.0}
    for task in tqdm(tasks, desc=suite, unit="task"):
        t0 = time.perf_counter()
        results = probe_replay.evaluate_policies(specs, task)
        t1 = time.perf_counter()
        ok = [s for s, r in zip(specs, results) if r.ok]
        failed += [{"policy": r.policy, "task": task.id, "error": str(r.error)} for r in results if not r.ok]
        for r in results:
            passed[r.policy].append(r.n_passed)
            probes[r.policy].append(len(r.probes))
            cost[r.policy].append(r.cost_cents)
        for row in measure(fidelity_replay, ok, task, first_tokens=False):
            fid[row.policy].append(row)
        seconds["probes"] += t1 - t0
        seconds["fidelity"] += time.perf_counter() - t1
    lost = {f["policy"] for f in failed}
    labels = tuple(s.display for s in specs if s.display not in lost)
    per = [per_task(fid[label], bound) for label in labels]
    shape = (len(labels), len(tasks))
    return SuiteEvaluation(
        suite, tuple(t.id for t in tasks), labels,
        np.array([passed[x] for x in labels], dtype=float).reshape(shape),
        np.array([probes[x] for x in labels], dtype=float).reshape(shape),
        {name: np.array([p[name] for p in per], dtype=float).reshape(shape) for name in STATISTICS},
        np.array([cost[x] for x in labels], dtype=float).reshape(shape), tuple(failed), seconds)


def pooled(evals: Sequence[SuiteEvaluation]) -> SuiteEvaluation:
    """The suites' evaluations side by side (tasks concatenated), over the policies every suite has."""
    keep = [x for x in evals[0].labels if all(x in e.labels for e in evals)]
    parts = [e.rows(keep) for e in evals]
    return SuiteEvaluation("pooled", tuple(t for e in parts for t in e.tasks), tuple(keep),
                           np.hstack([e.passed for e in parts]), np.hstack([e.probes for e in parts]),
                           {k: np.hstack([e.stats[k] for e in parts]) for k in STATISTICS},
                           np.hstack([e.cost_cents for e in parts]), tuple(f for e in evals for f in e.failed),
                           {k: sum(e.seconds[k] for e in evals) for k in ("probes", "fidelity")})


def summary(ev: SuiteEvaluation, bound: float, *, samples: int, seed: int,
            groups: Sequence[int] | None = None) -> dict[str, Any]:
    """The statistics of one evaluation (``groups``: its suites' task counts, for the bootstrap)."""
    rate = pass_rates(ev.passed, ev.probes)
    means = {k: v.mean(axis=1) for k, v in ev.stats.items()}
    cost = ev.cost_cents.mean(axis=1)
    labels = list(ev.labels)
    corr = rank_correlations(ev.passed, ev.probes, ev.stats, samples=samples, seed=seed, groups=groups)
    full = cost[labels.index("expert:full")] if "expert:full" in labels else None
    rows: list[dict[str, Any]] = [{"policy": label, "probe_pass": float(rate[i]), "probes": int(ev.probes[i].sum()),
             **{k: float(means[k][i]) for k in STATISTICS}, "cost_cents_mean": float(cost[i]),
             "cost_vs_full_pct": float(100 * (cost[i] / full - 1)) if full else None,
             "per_task": [{"task": t, "probes_passed": int(ev.passed[i, j]), "probes": int(ev.probes[i, j]),
                           **{k: float(ev.stats[k][i, j]) for k in STATISTICS}} for j, t in enumerate(ev.tasks)]}
            for i, label in enumerate(labels)]
    misses = [{"policy": r["policy"], "task": c["task"], "probes_passed": c["probes_passed"], "probes": c["probes"],
               "worst_delta": c["worst_delta"]}
              for r in rows for c in r["per_task"] if c["probes_passed"] < c["probes"] and c["worst_delta"] >= -bound]
    return {"tasks": list(ev.tasks), "policies": len(labels), "failed": list(ev.failed), "seconds": ev.seconds,
            "ties": {"probe_pass": ties(rate, 1.0).as_dict(), "bound_pass": ties(means["bound_pass"], 1.0).as_dict(),
                     "mean_delta": ties(means["mean_delta"], 0.0).as_dict(),
                     "worst_delta": ties(means["worst_delta"], 0.0).as_dict()},
            "correlations": {k: c.as_dict() for k, c in corr.items()},
            "ranges": {"probe_pass": extent(labels, rate).as_dict(),
                       **{k: extent(labels, means[k]).as_dict() for k in STATISTICS},
                       "cost_cents_mean": extent(labels, cost).as_dict()},
            "rows": rows, "probe_lost_within_bound": misses}


def report(evals: Sequence[SuiteEvaluation], bound: float, *, samples: int, seed: int) -> dict[str, dict[str, Any]]:
    """:func:`summary` of each suite, and of all of them pooled when there are several."""
    out = {e.suite: summary(e, bound, samples=samples, seed=seed) for e in evals}
    if len(evals) > 1:
        out["pooled"] = summary(pooled(evals), bound, samples=samples, seed=seed,
                                groups=[len(e.tasks) for e in evals])
    return out
