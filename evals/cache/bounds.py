"""What one rule family could do with hindsight: the rolling drop tuned per task, and once for all tasks.

Beside the oracle (:mod:`evals.cache.oracle`, any schedule), two bounds of the expert's family,
both at the oracle's accuracy (every probe the full cache passes must pass on every task):

- **per task** (:func:`per_task_rolling`): on each task, the cheapest setting of :func:`rolling_grid`
  the model passes there. The gap between it and the oracle is what new structure could win.
- **one setting** (:func:`single_setting`): the cheapest setting the model passes on every task
  at once. The gap between it and the per-task bound is what choosing the setting per task (a
  conditional policy) could win; the gap between it and the best one setting *tuned on train* is
  what tuning itself leaves.

Both are upper bounds of what they describe: the grid is finite, and settings are tried with the
model in order of cost only when the evidence rule predicts they pass (``predicted``: a required
probe passes when its evidence is still attended, ``evals.cache.fidelity``'s rule with the
pessimistic outcome that a dropped-evidence probe fails), ``budget`` model evaluations at most;
when none passes, the answer is the full cache (which passes by definition). Every number a bound
reports was answered by the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.cache.evaluator import PolicySpec, TaskResult
from evals.cache.oracle import Judge, failing, required_probes
from evals.tasks.schema import Task

Predict = Callable[[PolicySpec, Task], TaskResult]
"""(policy, task) -> a zero-forward result: exact cost, probes predicted by the evidence rule."""

TARGETS = ("tool", "assistant", "both", "assistant_newest", "both_newest")
TOKEN_TARGETS = ("tool", "assistant_newest", "both_newest")


KEEPS = (0, 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32, 40)


def rolling_grid(keeps: Sequence[int] = KEEPS) -> list[dict[str, Any]]:
    """The rolling-drop settings the bounds choose from: every target with each K of ``keeps`` rolled
    on arrival, and a token trigger (512-4,096 tokens, cut to 25-75% of it) for the targets it allows."""
    grid: list[dict[str, Any]] = [{"keep_tool_responses": k, "target": t} for t in TARGETS for k in keeps]
    for t in TOKEN_TARGETS:
        for trigger in (512, 1024, 2048, 4096):
            for ratio in (0.25, 0.5, 0.75):
                grid.append({"target": t, "trigger": "tokens", "trigger_tokens": trigger,
                             "target_tokens": int(trigger * ratio)})
    return grid


def rolling_spec(params: Mapping[str, Any]) -> PolicySpec:
    short = ",".join(f"{k}={v}" for k, v in params.items())
    return PolicySpec("rolling_drop", dict(params), label=f"rolling_drop({short})")


@dataclass(frozen=True)
class Bound:
    """The bound on one task: the setting chosen (``None``: the full cache) and the model's result."""

    task_id: str
    params: dict[str, Any] | None
    result: TaskResult
    evaluations: int

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "params": self.params, "cost_cents": self.result.cost_cents,
                "pass_rate": self.result.pass_rate, "evaluations": self.evaluations}


def _predicted(task: Task, required: Sequence[int], predict: Predict,
               grid: Sequence[dict[str, Any]]) -> dict[int, float]:
    """Grid index -> cost of every setting predicted to pass ``required`` on ``task``."""
    out = {}
    for i, params in enumerate(grid):
        r = predict(rolling_spec(params), task)
        if r.ok and not failing(r, required):
            out[i] = r.cost_cents
    return out


def per_task_rolling(task: Task, full: TaskResult, judge: Judge, predict: Predict,
                     grid: Sequence[dict[str, Any]] | None = None, budget: int = 4) -> Bound:
    """The cheapest setting the model passes on ``task`` (module docstring)."""
    required = required_probes(full)
    grid = list(grid or rolling_grid())
    evaluations = 0
    for _, i in sorted((c, i) for i, c in _predicted(task, required, predict, grid).items()):
        if evaluations >= budget:
            break
        evaluations += 1
        params = grid[i]
        r = judge(rolling_spec(params), task)
        if r.ok and not failing(r, required):
            return Bound(task.id, params, r, evaluations)
    return Bound(task.id, None, full, evaluations)


@dataclass(frozen=True)
class SingleSetting:
    """The one setting chosen for every task (``None``: the full cache) and its per-task results."""

    params: dict[str, Any] | None
    results: tuple[TaskResult, ...]
    evaluations: int
    candidates_tried: int

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "cost_cents": sum(r.cost_cents for r in self.results),
                "per_task": {r.task_id: r.cost_cents for r in self.results}, "evaluations": self.evaluations,
                "candidates_tried": self.candidates_tried}


def single_setting(tasks: Sequence[Task], fulls: Sequence[TaskResult], judge: Judge, predict: Predict,
                   grid: Sequence[dict[str, Any]] | None = None, budget: int = 3) -> SingleSetting:
    """The cheapest setting the model passes on every task at once (module docstring); ``budget``
    counts candidate settings, each evaluated on the tasks in turn until one fails."""
    grid = list(grid or rolling_grid())
    required = [required_probes(f) for f in fulls]
    feasible: dict[int, float] | None = None  # settings predicted to pass on every task so far -> summed cost
    for task, need in zip(tasks, required):
        costs = _predicted(task, need, predict, grid)
        feasible = costs if feasible is None else {i: feasible[i] + c for i, c in costs.items() if i in feasible}
    ranked = sorted((c, i) for i, c in (feasible or {}).items())
    evaluations = 0
    for tried, (_, i) in enumerate(ranked[:budget], 1):
        spec, results = rolling_spec(grid[i]), []
        for task, need in zip(tasks, required):
            evaluations += 1
            r = judge(spec, task)
            if not r.ok or failing(r, need):
                break
            results.append(r)
        else:
            return SingleSetting(grid[i], tuple(results), evaluations, tried)
    return SingleSetting(None, tuple(fulls), evaluations, min(budget, len(ranked)))
