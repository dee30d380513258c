"""Choosing a fixed number of tasks from a suite: spread evenly over families, deterministic."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from evals.tasks.schema import Task


def select_tasks(tasks: Sequence[Task], n: int) -> list[Task]:
    """``n`` tasks (0 = all) spread evenly over families: the first of each family (families in
    sorted order), then the second of each, and so on, keeping the suite's order within a family."""
    if n <= 0 or n >= len(tasks):
        return list(tasks)
    by: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by[t.family].append(t)
    out: list[Task] = []
    i = 0
    while len(out) < n:
        for fam in sorted(by):
            if i < len(by[fam]) and len(out) < n:
                out.append(by[fam][i])
        i += 1
    return out
