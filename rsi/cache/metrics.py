"""Aggregate task results into the two objectives and the breakdowns a report or proposer needs."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evals.cache.evaluator import TaskResult


@dataclass(frozen=True)
class Metrics:
    """A candidate's score on a set of tasks.

    Attributes:
        pass_rate: passed probes / probes over all tasks (micro average).
        cost_cents_mean: mean cost per task, in cents.
        n_tasks, n_probes: sample sizes.
        per_family: family -> pass rate.
        cost_breakdown: component -> mean cents per task (input, cached, repos, output, summary).
        failed: tasks whose evaluation failed (then the metrics are not a score).
    """

    pass_rate: float
    cost_cents_mean: float
    n_tasks: int
    n_probes: int
    per_family: dict[str, float] = field(default_factory=dict)
    cost_breakdown: dict[str, float] = field(default_factory=dict)
    failed: int = 0

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.n_tasks > 0 and not math.isnan(self.pass_rate)

    def to_dict(self) -> dict[str, Any]:
        return {"pass_rate": self.pass_rate, "cost_cents_mean": self.cost_cents_mean, "n_tasks": self.n_tasks,
                "n_probes": self.n_probes, "per_family": self.per_family, "cost_breakdown": self.cost_breakdown,
                "failed": self.failed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metrics:
        return cls(**d)


def aggregate(results: Sequence[TaskResult]) -> Metrics:
    """Objectives of ``results`` (all for one candidate)."""
    ok = [r for r in results if r.ok]
    failed = len(results) - len(ok)
    probes = [p for r in ok for p in r.probes]
    fam: dict[str, list[bool]] = defaultdict(list)
    for r in ok:
        fam[r.family].extend(p.passed for p in r.probes)
    parts = ("input", "cached", "repos", "output", "summary")
    breakdown = {k: (sum(getattr(r.cost, k) for r in ok) * 100 / len(ok) if ok else float("nan")) for k in parts}
    return Metrics(
        pass_rate=sum(p.passed for p in probes) / len(probes) if probes else float("nan"),
        cost_cents_mean=sum(r.cost_cents for r in ok) / len(ok) if ok else float("nan"),
        n_tasks=len(ok), n_probes=len(probes),
        per_family={f: sum(v) / len(v) for f, v in sorted(fam.items()) if v},
        cost_breakdown=breakdown, failed=failed,
    )
