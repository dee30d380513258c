"""Task selection: evenly by family, with an offset into that order (checked against a slow obvious
reference)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from evals.tasks import select_tasks


def _tasks(families: list[str]) -> list[Any]:
    return [SimpleNamespace(id=f"t{i}", family=f) for i, f in enumerate(families)]


def _reference(tasks: list[Any], n: int, offset: int) -> list[Any]:
    """Round by round: in round r, the r-th task of each family (families sorted), while one remains."""
    order: list[Any] = []
    r = 0
    while len(order) < len(tasks):
        for fam in sorted({t.family for t in tasks}):
            members = [t for t in tasks if t.family == fam]
            if r < len(members):
                order.append(members[r])
        r += 1
    if offset == 0 and (n <= 0 or n >= len(tasks)):
        return list(tasks)  # all of them, in the suite's order
    return order[offset:offset + n] if n > 0 else order[offset:]


def test_selection_with_an_offset_matches_the_reference_on_random_suites():
    rng = random.Random(7)
    for _ in range(300):
        tasks = _tasks([rng.choice("abcd") for _ in range(rng.randint(1, 20))])
        n, offset = rng.randint(0, 22), rng.randint(0, len(tasks) - 1)
        assert [t.id for t in select_tasks(tasks, n, offset)] == [t.id for t in _reference(tasks, n, offset)]


def test_an_offset_continues_the_order_and_an_offset_past_the_end_is_refused():
    tasks = _tasks(["b", "a", "a", "b", "c", "a"])
    first, second = select_tasks(tasks, 2), select_tasks(tasks, 2, offset=2)
    assert [t.id for t in first + second] == [t.id for t in select_tasks(tasks, 4)] == ["t1", "t0", "t4", "t2"]
    with pytest.raises(ValueError, match="offset must be below the 6 tasks, got 6"):
        select_tasks(tasks, 2, offset=6)
