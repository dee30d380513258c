"""Choosing a fixed number of tasks from a suite: spread evenly over families, deterministic."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from evals.tasks.schema import Task


def select_tasks(tasks: Sequence[Task], n: int, offset: int = 0) -> list[Task]:
    """``n`` tasks (0 = all) spread evenly over families: the first of each family (families in
    sorted order), then the second of each, and so on, keeping the suite's order within a family.
    ``offset`` skips the first ``offset`` tasks of that order (so ``select_tasks(ts, n, n)`` are the
    ``n`` tasks that ``select_tasks(ts, 2 * n)`` adds to ``select_tasks(ts, n)``).

    Raises:
        ValueError: ``offset`` leaves no task.
    """
    if offset == 0 and (n <= 0 or n >= len(tasks)):
        return list(tasks)
    if offset >= len(tasks):
        raise ValueError(f"offset must be below the {len(tasks)} tasks, got {offset}")
    by: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by[t.family].append(t)
    ordered = [by[fam][i] for i in range(max(map(len, by.values()))) for fam in sorted(by) if i < len(by[fam])]
    return ordered[offset:offset + n] if n > 0 else ordered[offset:]
