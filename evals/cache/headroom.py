"""The headroom of a task set: the full cache, the hindsight oracle and the rolling-drop bounds, per task.

What ``akv oracle`` writes and what a search reports on held-out (``oracle.enabled``): for every
task, the full cache's model result, the oracle's schedule (:mod:`evals.cache.oracle`) and the
rolling drop tuned for that task (:mod:`evals.cache.bounds`); over all tasks, the one rolling-drop
setting that passes everywhere, the gap between it and the per-task bound (a paired bootstrap
over tasks, :mod:`evals.paired`), and the probe-blind keep/drop table over role, tool and length
chosen with hindsight (:mod:`evals.cache.table_bound`: what a rule over those features could reach
knowing which of them matter here; the rest of the oracle's headroom needs the evidence itself).

Model evaluations go through ``evaluate`` (the caller's engine, executor or store); costs and the
evidence-rule predictions that order the bounds' candidates are made without a forward by a
:class:`~evals.cache.fidelity.ProxyReplay` over the caller's dry engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evals.cache.bounds import Bound, SingleSetting, per_task_rolling, rolling_grid, single_setting
from evals.cache.evaluator import EvalConfig, PolicySpec, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, ProbeOutcome, ProxyReplay
from evals.cache.oracle import OracleConfig, OracleResult, hindsight
from evals.cache.table_bound import TableBound, table_bound
from evals.paired import PairingError, pair_results, paired_bootstrap
from evals.tasks.schema import Task

FULL = PolicySpec("full", label="full")


@dataclass(frozen=True)
class TaskHeadroom:
    """One task: the full cache, the oracle and the per-task rolling-drop bound."""

    task: Task
    full: TaskResult
    oracle: OracleResult
    rolling: Bound

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task.id, "family": self.task.family, "full_cost_cents": self.full.cost_cents,
                "full_pass_rate": self.full.pass_rate, "oracle": self.oracle.to_dict(),
                "per_task_rolling": self.rolling.to_dict()}


@dataclass(frozen=True)
class Headroom:
    """Every task's :class:`TaskHeadroom`, the one-setting bound and the rule table over all of them."""

    tasks: tuple[TaskHeadroom, ...]
    single: SingleSetting
    table: TableBound | None = None

    def totals(self) -> dict[str, float]:
        """Summed cost in cents over the tasks: full, oracle, per-task and one-setting rolling drop, and
        the rule table (when measured)."""
        out = {"full": sum(t.full.cost_cents for t in self.tasks),
               "oracle": sum(t.oracle.cost_cents for t in self.tasks),
               "per_task_rolling": sum(t.rolling.result.cost_cents for t in self.tasks),
               "single_rolling": sum(r.cost_cents for r in self.single.results)}
        if self.table is not None:
            out["rule_table"] = self.table.cost_cents
        return out

    def gap(self, samples: int = 2000, seed: int = 0) -> dict[str, Any] | None:
        """The per-task bound against the one setting, paired over tasks (``None`` below 2 tasks)."""
        try:
            d = paired_bootstrap(pair_results([t.rolling.result for t in self.tasks], list(self.single.results)),
                                 samples=samples, seed=seed)
        except PairingError:
            return None
        return {"cost_delta_pct": d.cost_delta_pct, "cost_delta_ci95": list(d.cost_delta_ci95),
                "pass_delta": d.pass_delta, "pass_delta_ci95": list(d.pass_delta_ci95), "tasks": d.n_tasks,
                "significant": d.significant}

    def to_dict(self, samples: int = 2000, seed: int = 0) -> dict[str, Any]:
        totals = self.totals()
        full = totals["full"] or 1.0
        return {"tasks": [t.to_dict() for t in self.tasks], "totals_cents": totals,
                "saving_vs_full_pct": {k: 100.0 * (1 - v / full) for k, v in totals.items() if k != "full"},
                "single_rolling": self.single.to_dict(),
                "per_task_vs_single_rolling": self.gap(samples, seed),
                "rule_table": self.table.to_dict() if self.table is not None else None,
                "model_evaluations": sum(t.oracle.evaluations + t.rolling.evaluations for t in self.tasks)
                + self.single.evaluations + (self.table.evaluations if self.table is not None else 0)}


def pessimistic_proxy(dry: DryEngine, fulls: Sequence[TaskResult], config: EvalConfig | None = None) -> ProxyReplay:
    """A zero-forward replay that predicts a probe passes when the full cache passed it and its
    evidence is still attended (a probe whose evidence is gone is predicted to fail): exact costs
    and the evidence rule, from the full cache's results alone."""
    outcomes = {(r.task_id, p.index): ProbeOutcome(p.passed, False) for r in fulls for p in r.probes}
    return ProxyReplay(dry, EvidenceTable(outcomes), config)


def measure_headroom(tasks: Sequence[Task], evaluate: Callable[[PolicySpec, Task], TaskResult], dry: DryEngine,
                     eval_config: EvalConfig | None = None, config: OracleConfig | None = None, *,
                     bound_budget: int = 4, single_budget: int = 3, grid: Sequence[dict[str, Any]] | None = None,
                     on_task: Callable[[TaskHeadroom], None] | None = None, table: bool = True) -> Headroom:
    """The headroom of ``tasks`` (module docstring); ``on_task`` is called as each task is done;
    ``table``: also the rule table (one more model evaluation per task)."""
    fulls = [evaluate(FULL, t) for t in tasks]
    proxy = pessimistic_proxy(dry, fulls, eval_config)

    def cost(spec: PolicySpec, task: Task) -> float:
        return proxy.cost(spec, task).cents

    grid = list(grid or rolling_grid())
    done = []
    for task, full in zip(tasks, fulls):
        oracle = hindsight(task, full, evaluate, cost, config)
        bound = per_task_rolling(task, full, evaluate, proxy.evaluate, grid, bound_budget)
        done.append(TaskHeadroom(task, full, oracle, bound))
        if on_task is not None:
            on_task(done[-1])
    single = single_setting(tasks, fulls, evaluate, proxy.evaluate, grid, single_budget)
    rules = None
    if table:
        rules = table_bound(tasks, fulls, evaluate, cost, lambda t: dry.render(list(t.messages)).message_tokens)
    return Headroom(tuple(done), single, rules)
